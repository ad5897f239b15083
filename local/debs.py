#!/usr/bin/env python3
"""Debian packages as data sources: fetch a package's .deb and read or unpack its files without
installing it (no root, no dpkg: the .deb's ar archive and its data.tar are read here).

The one owner of fetching and unpacking for the scripts that take recordings from Debian
packages (``prepare_real.py``, ``extract_bass.py``, ``extract_fotaq.py``, ``prepare.sh
--dataset games``).  A .deb is an ar archive whose ``data.tar.*`` member holds the files under
their installed paths; Python's tarfile reads it when it is gzip, xz or bzip2 compressed or
plain.  A zstd-compressed one is handed to ``dpkg-deb -x`` where that is installed.

Usage:
  python local/debs.py fetch PACKAGE DIR        # DIR/PACKAGE_*.deb, downloaded unless there; prints its path
  python local/debs.py unpack DEB DIR           # the package's files under DIR (DIR/usr/share/...)
"""

import argparse
import io
import logging
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Callable, Optional, Tuple

from zipformer_pc.logs import setup_logging

AR_MAGIC = b"!<arch>\n"
AR_HEADER = 60


class DebError(Exception):
    """A .deb that cannot be read: the message says what and what to do."""


def data_tar(deb: Path) -> Tuple[str, bytes]:
    """(member name, bytes) of the ``data.tar.*`` member of the .deb ``deb``."""
    raw = Path(deb).read_bytes()
    if raw[:len(AR_MAGIC)] != AR_MAGIC:
        raise DebError(f"{deb} is not a .deb (an ar archive)")
    pos = len(AR_MAGIC)
    while pos + AR_HEADER <= len(raw):
        header = raw[pos:pos + AR_HEADER]
        name = header[:16].decode("ascii", "replace").strip().rstrip("/")
        try:
            size = int(header[48:58].decode("ascii").strip())
        except ValueError:
            raise DebError(f"{deb}: a damaged ar header at byte {pos}") from None
        if name.startswith("data.tar"):
            body = raw[pos + AR_HEADER:pos + AR_HEADER + size]
            if len(body) != size:
                raise DebError(f"{deb} is cut short ({name}: {len(body)} of {size} bytes)")
            return name, body
        pos += AR_HEADER + size + (size & 1)  # members start at even offsets
    raise DebError(f"{deb} has no data.tar member")


def installed_path(member: str) -> str:
    """A data.tar member's name as a path under / without its leading ``./`` or ``/``."""
    return member[2:] if member.startswith("./") else member.lstrip("/")


def _open_tar(deb: Path) -> Optional[tarfile.TarFile]:
    """The data tar of ``deb`` opened for reading, or None when it is zstd (Python cannot read it)."""
    name, body = data_tar(deb)
    if name.endswith(".zst"):
        return None
    try:
        return tarfile.open(fileobj=io.BytesIO(body), mode="r:*")
    except tarfile.TarError as e:
        raise DebError(f"{deb}: {name} cannot be read ({e})") from None


def _dpkg_unpack(deb: Path, dest: Path) -> None:
    if shutil.which("dpkg-deb") is None:
        raise DebError(f"{deb} holds a zstd-compressed data.tar, which needs dpkg-deb (Debian's dpkg) to unpack: "
                       "unpack it with `dpkg-deb -x` elsewhere and give the folder instead")
    subprocess.run(["dpkg-deb", "-x", str(deb), str(dest)], check=True)


def read_member(deb: Path, wanted: Callable[[str], bool]) -> Tuple[str, bytes]:
    """(installed path without the leading ``./``, bytes) of the first regular file of ``deb``
    whose path ``wanted`` accepts."""
    tar = _open_tar(deb)
    if tar is None:
        with tempfile.TemporaryDirectory() as tmp:
            _dpkg_unpack(deb, Path(tmp))
            for f in sorted(Path(tmp).rglob("*")):
                path = f.relative_to(tmp).as_posix()
                if f.is_file() and not f.is_symlink() and wanted(path):
                    return path, f.read_bytes()
        raise DebError(f"{deb} holds no such file")
    with tar:
        for m in tar.getmembers():
            path = installed_path(m.name)
            if m.isfile() and wanted(path):
                f = tar.extractfile(m)
                assert f is not None
                return path, f.read()
    raise DebError(f"{deb} holds no such file")


def unpack(deb: Path, dest: Path) -> Path:
    """The files of ``deb`` under ``dest`` at their installed paths (``dest/usr/share/...``), as
    ``dpkg-deb -x`` leaves them; links and paths that would leave ``dest`` are refused."""
    deb, dest = Path(deb), Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    tar = _open_tar(deb)
    if tar is None:
        _dpkg_unpack(deb, dest)
        return dest
    with tar:
        try:
            tar.extractall(dest, filter="data")
        except tarfile.FilterError as e:
            raise DebError(f"{deb}: refused to unpack ({e})") from None
    return dest


def fetch(pkg: str, dest_dir: Path) -> Path:
    """``dest_dir/PKG_*.deb``: the one there, else downloaded by ``apt-get download`` (no root)."""
    dest_dir = Path(dest_dir)
    have = sorted(dest_dir.glob(f"{pkg}_*.deb"))
    if have:
        return have[-1]
    if shutil.which("apt-get") is None:
        raise DebError(f"{pkg}: no {dest_dir}/{pkg}_*.deb and no apt-get to download it: copy the package's "
                       f".deb there (any Debian mirror has it)")
    dest_dir.mkdir(parents=True, exist_ok=True)
    logging.info(f"Fetching {pkg} (apt-get download) into {dest_dir}")
    with tempfile.TemporaryDirectory(dir=dest_dir) as tmp:
        r = subprocess.run(["apt-get", "download", "-qq", pkg], cwd=tmp, capture_output=True, text=True)
        got = sorted(Path(tmp).glob(f"{pkg}_*.deb"))
        if r.returncode != 0 or not got:
            raise DebError(f"could not download {pkg} ({r.stderr.strip()[:300] or 'apt-get gave no .deb'}); "
                           f"put its .deb into {dest_dir} and run again")
        return Path(shutil.move(str(got[-1]), str(dest_dir / got[-1].name)))


def main(argv=None) -> int:
    setup_logging()
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    f = sub.add_parser("fetch", help="print the path of DIR/PACKAGE_*.deb, downloading it unless there")
    f.add_argument("package")
    f.add_argument("dir", type=Path)
    u = sub.add_parser("unpack", help="unpack DEB's files under DIR")
    u.add_argument("deb", type=Path)
    u.add_argument("dir", type=Path)
    args = p.parse_args(argv)
    try:
        if args.cmd == "fetch":
            print(fetch(args.package, args.dir))
        else:
            unpack(args.deb, args.dir)
    except (DebError, OSError) as e:
        print(f"debs.py: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
