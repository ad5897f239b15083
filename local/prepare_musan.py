#!/usr/bin/env python3
"""MUSAN's noise and music as lhotse cuts, for mixing into training (train.py --musan-cuts).

Usage:
  ./local/prepare_musan.py --dl-dir download --output-dir data/musan
  ./local/prepare_musan.py --dl-dir download --output-dir data/musan --url /mnt/copies/musan.tar.gz

MUSAN (Snyder, Chen and Povey, OpenSLR resource 17, 11 GB) is downloaded to
``DL_DIR/musan.tar.gz`` and unpacked to ``DL_DIR/musan`` unless that folder is
there already (a machine without internet can use a copy placed there by hand,
or name a local archive with ``--url``, a path or a file:// URL).  Its
``noise`` and ``music`` parts (``--parts``; not ``speech``, as icefall leaves it
out) are scanned for wav files, cut into ``--window`` (10) second windows and
the windows shorter than ``--min-duration`` (5) seconds dropped, as icefall's
compute_fbank_musan.py does, but without computing features: training mixes
them into the audio (zipformer_pc.data.musan).  Writes
``musan_recordings_{part}.jsonl.gz``, ``musan_cuts.jsonl.gz`` and
``musan.json`` (files, windows and hours per part) under ``--output-dir``.
"""

import argparse
import json
import logging
import shutil
import tarfile
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Dict, List

from zipformer_pc.logs import setup_logging

MUSAN_URL = "https://www.openslr.org/resources/17/musan.tar.gz"
PARTS = ("noise", "music", "speech")


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dl-dir", required=True, help="Where musan.tar.gz and the unpacked musan/ go")
    p.add_argument("--output-dir", required=True, help="Where the manifests go")
    p.add_argument("--url", default=MUSAN_URL, help="The archive: an http(s) or file:// URL, or a local path")
    p.add_argument("--parts", default="noise,music", help=f"Comma list of {', '.join(PARTS)}")
    p.add_argument("--window", type=float, default=10.0, help="Seconds per cut")
    p.add_argument("--min-duration", type=float, default=5.0, help="Shorter windows are dropped")
    return p


def fetch(url: str, dest: Path) -> None:
    """``url`` (http, https, file:// or a local path) to ``dest``, through ``dest.part``: an
    interrupted download leaves no archive that looks complete."""
    part = dest.with_name(dest.name + ".part")
    scheme = urllib.parse.urlparse(url).scheme
    if scheme in ("", "file") and not url.startswith("file:"):
        shutil.copyfile(url, part)
    else:
        urllib.request.urlretrieve(url, part)
    part.rename(dest)


def unpack(dl_dir: Path, url: str) -> Path:
    """DL_DIR/musan, downloaded and unpacked unless it is complete already (its marker)."""
    corpus = dl_dir / "musan"
    marker = dl_dir / ".musan_unpacked"
    if marker.is_file() or (corpus.is_dir() and not (dl_dir / "musan.tar.gz").exists() and any(corpus.rglob("*.wav"))):
        logging.info(f"MUSAN present in {corpus}")
        return corpus
    dl_dir.mkdir(parents=True, exist_ok=True)
    tgz = dl_dir / "musan.tar.gz"
    if not tgz.exists():
        logging.info(f"Downloading {url} (MUSAN, about 11 GB from OpenSLR)")
        fetch(url, tgz)
    with tarfile.open(tgz) as tar:
        tar.extractall(dl_dir, filter="data")
    if not corpus.is_dir():
        raise SystemExit(f"{tgz} did not hold a musan/ folder")
    marker.touch()
    logging.info(f"MUSAN unpacked to {corpus}")
    return corpus


def main() -> None:
    setup_logging()
    args = get_parser().parse_args()
    parts = [p for p in args.parts.split(",") if p]
    bad = [p for p in parts if p not in PARTS]
    if bad or not parts:
        raise SystemExit(f"--parts: {', '.join(bad) or 'nothing'} (known: {', '.join(PARTS)})")
    if not 0 < args.min_duration <= args.window:
        raise SystemExit(f"--min-duration must be in (0, --window], got {args.min_duration} and {args.window}")
    from lhotse import CutSet, Recording, RecordingSet

    from zipformer_pc.features import SAMPLING_RATE

    corpus = unpack(Path(args.dl_dir), args.url)
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    report: Dict[str, Dict[str, float]] = {}
    windows: List = []
    for part in parts:
        files = sorted((corpus / part).rglob("*.wav"))
        if not files:
            raise SystemExit(f"No wav file under {corpus / part}")
        recs = RecordingSet.from_recordings(Recording.from_file(f) for f in files)
        recs.to_file(out / f"musan_recordings_{part}.jsonl.gz")
        cuts = CutSet.from_manifests(recordings=recs).cut_into_windows(args.window)
        # the recipe's rate (MUSAN's own): lhotse mixes cuts of one rate only
        kept = [c if c.sampling_rate == SAMPLING_RATE else c.resample(SAMPLING_RATE)
                for c in cuts if c.duration >= args.min_duration]
        windows.extend(kept)
        report[part] = {"files": len(files), "windows": len(kept),
                        "hours": round(sum(c.duration for c in kept) / 3600, 3)}
        logging.info(f"{part}: {len(files)} files, {len(kept)} windows of {args.min_duration:g} to "
                     f"{args.window:g} s ({report[part]['hours']} h)")
    CutSet.from_cuts(windows).to_file(out / "musan_cuts.jsonl.gz")
    (out / "musan.json").write_text(json.dumps({"parts": report, "window": args.window,
                                                "min_duration": args.min_duration}, indent=1) + "\n")
    logging.info(f"Wrote {out / 'musan_cuts.jsonl.gz'}: {len(windows)} cuts")


if __name__ == "__main__":
    main()
