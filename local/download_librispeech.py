#!/usr/bin/env python3
"""Download LibriSpeech parts and the LibriSpeech-PC manifests (needs internet).

Usage:
  ./local/download_librispeech.py --dl-dir download --parts test-clean,train-clean-100

LibriSpeech goes to ``DL_DIR/LibriSpeech/<part>`` (lhotse's downloader);
LibriSpeech-PC's manifests (OpenSLR resource 145) are unpacked to
``DL_DIR/LibriSpeech-PC``.  Anything already present is not downloaded again,
so a machine without internet can use copies placed there by hand.
"""

import argparse
import logging
import tarfile
import urllib.request
from pathlib import Path

from zipformer_pc.logs import setup_logging

PC_URL = "https://www.openslr.org/resources/145/manifests.tar.gz"


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dl-dir", required=True)
    p.add_argument("--parts", required=True)
    p.add_argument("--pc-url", default=PC_URL)
    return p


def main() -> None:
    setup_logging()
    args = get_parser().parse_args()
    dl = Path(args.dl_dir)
    dl.mkdir(parents=True, exist_ok=True)
    parts = [p for p in args.parts.split(",") if p]
    todo = [p for p in parts if not (dl / "LibriSpeech" / p).is_dir()]
    if todo:
        from lhotse.recipes import download_librispeech

        logging.info(f"Downloading LibriSpeech parts: {', '.join(todo)}")
        download_librispeech(target_dir=dl, dataset_parts=todo)
    else:
        logging.info("All LibriSpeech parts present")
    pc_dir = dl / "LibriSpeech-PC"
    if pc_dir.is_dir() and any(pc_dir.rglob("*.json")):
        logging.info(f"LibriSpeech-PC manifests present in {pc_dir}")
        return
    pc_dir.mkdir(parents=True, exist_ok=True)
    tgz = dl / "librispeech_pc_manifests.tar.gz"
    if not tgz.exists():
        logging.info(f"Downloading {args.pc_url}")
        urllib.request.urlretrieve(args.pc_url, tgz.with_suffix(".part"))
        tgz.with_suffix(".part").rename(tgz)
    with tarfile.open(tgz) as tar:
        tar.extractall(pc_dir, filter="data")
    logging.info(f"LibriSpeech-PC manifests unpacked to {pc_dir}")


if __name__ == "__main__":
    main()
