"""local/debs.py: a .deb's files read and unpacked without dpkg, on small packages built here,
and its refusals of what is not a readable package."""

import io
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from conftest import local_module

ROOT = Path(__file__).resolve().parents[2]

debs = local_module("debs")


def _tar(files, mode="w:xz", links=()):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode=mode) as t:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
        for name, target in links:
            info = tarfile.TarInfo(name)
            info.type = tarfile.SYMTYPE
            info.linkname = target
            t.addfile(info)
    return buf.getvalue()


def _ar(members):
    out = b"!<arch>\n"
    for name, data in members:
        out += f"{name:<16}{0:<12}{0:<6}{0:<6}{100644:<8}{len(data):<10}`\n".encode("ascii") + data
        if len(data) % 2:
            out += b"\n"
    return out


def build_deb(path, files, data_name="data.tar.xz", mode="w:xz", links=()):
    control = b"never read, odd size"[:19]  # odd-sized, so the data member starts after a padding byte
    assert len(control) % 2 == 1
    path.write_bytes(_ar([("debian-binary", b"2.0\n"), ("control.tar.gz", control),
                          (data_name, _tar(files, mode, links))]))
    return path


GAME = {"./usr/share/games/queen/queen.1c": b"QTBL" + bytes(range(40)),
        "./usr/share/doc/queen/copyright": b"free\n"}


@pytest.mark.parametrize("data_name,mode", [("data.tar.xz", "w:xz"), ("data.tar.gz", "w:gz"), ("data.tar", "w:")])
def test_a_deb_is_read_and_unpacked_at_its_installed_paths(tmp_path, data_name, mode):
    deb = build_deb(tmp_path / "queen_1.0_all.deb", GAME, data_name, mode, links=[("./usr/share/games/q", "queen")])
    path, data = debs.read_member(deb, lambda p: p.endswith("/queen.1c"))
    assert (path, data) == ("usr/share/games/queen/queen.1c", GAME["./usr/share/games/queen/queen.1c"])
    with pytest.raises(debs.DebError, match="holds no such file"):
        debs.read_member(deb, lambda p: p.endswith(".wav"))
    out = debs.unpack(deb, tmp_path / "root")
    for name, data in GAME.items():
        assert (out / name[2:]).read_bytes() == data
    assert (out / "usr/share/games/q").is_symlink()


def test_what_is_not_a_readable_deb_is_refused_with_a_reason(tmp_path):
    text = tmp_path / "notes.deb"
    text.write_text("hello")
    with pytest.raises(debs.DebError, match="not a .deb"):
        debs.data_tar(text)
    no_data = tmp_path / "nodata.deb"
    no_data.write_bytes(_ar([("debian-binary", b"2.0\n")]))
    with pytest.raises(debs.DebError, match="no data.tar member"):
        debs.unpack(no_data, tmp_path / "x")
    full = build_deb(tmp_path / "full.deb", GAME).read_bytes()
    cut = tmp_path / "cut.deb"
    cut.write_bytes(full[:-200])
    with pytest.raises(debs.DebError, match="cut short"):
        debs.read_member(cut, lambda p: True)
    evil = build_deb(tmp_path / "evil.deb", {"./usr/share/ok": b"1", "../../outside": b"2"})
    with pytest.raises(debs.DebError, match="refused to unpack"):
        debs.unpack(evil, tmp_path / "evil_root")
    assert not (tmp_path / "outside").exists()


def test_fetch_keeps_a_downloaded_deb_and_says_what_to_do_without_apt(tmp_path, monkeypatch):
    have = build_deb(tmp_path / "queen_1.0_all.deb", GAME)
    assert debs.fetch("queen", tmp_path) == have  # not downloaded again
    monkeypatch.setattr(debs.shutil, "which", lambda name: None)
    with pytest.raises(debs.DebError, match="no apt-get") as e:
        debs.fetch("other", tmp_path / "dl")
    assert "other_*.deb" in str(e.value)
    # the command line: the path on stdout; an error as one line, exit 1
    env_py = [sys.executable, str(ROOT / "local" / "debs.py")]
    r = subprocess.run(env_py + ["fetch", "queen", str(tmp_path)], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.strip() == str(have), r.stderr
    r = subprocess.run(env_py + ["unpack", str(tmp_path / "missing.deb"), str(tmp_path / "o")],
                       capture_output=True, text=True)
    assert r.returncode == 1 and "Traceback" not in r.stderr and "missing.deb" in r.stderr, r.stderr
    r = subprocess.run(env_py + ["unpack", str(have), str(tmp_path / "o")], capture_output=True, text=True)
    assert r.returncode == 0 and (tmp_path / "o" / "usr/share/doc/queen/copyright").read_bytes() == b"free\n"
