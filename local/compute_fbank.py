#!/usr/bin/env python3
"""Compute 80-dim fbank features for a corpus split and write its cuts.

Usage:
  ./local/compute_fbank.py --manifest-dir data/synth/manifests --prefix synth \
      --split train --output-dir data/synth/fbank --speed-perturb false

Reads ``{prefix}_recordings_{split}.jsonl.gz`` and
``{prefix}_supervisions_{split}.jsonl.gz``, builds cuts, optionally adds
0.9x/1.1x speed-perturbed copies (train only), computes features with the
recipe's one fbank config (zipformer_pc.features) into lilcom chunky storage
``{prefix}_feats_{split}.lca``, and writes ``{prefix}_cuts_{split}.jsonl.gz``.
Audio at another sampling rate is resampled to the feature config's.  A cut
whose audio cannot be read or is empty is logged with its id, counted and
skipped.
"""

import argparse
import logging
from pathlib import Path

import torch

from zipformer_pc.features import SAMPLING_RATE, lhotse_fbank
from zipformer_pc.logs import setup_logging
from zipformer_pc.options import str2bool


def at_feature_rate(cut):
    """The cut resampled to the one feature config's rate when it has another."""
    return cut if cut.sampling_rate == SAMPLING_RATE else cut.resample(SAMPLING_RATE)


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--manifest-dir", required=True)
    p.add_argument("--prefix", required=True, help="Corpus prefix of the manifest names, e.g. synth")
    p.add_argument("--split", required=True)
    p.add_argument("--output-dir", required=True)
    p.add_argument("--speed-perturb", type=str2bool, default=False, help="Add 0.9x and 1.1x copies")
    p.add_argument("--num-threads", type=int, default=2)
    return p


def main() -> None:
    setup_logging()
    args = get_parser().parse_args()
    from lhotse import CutSet, LilcomChunkyWriter, load_manifest
    from tqdm import tqdm

    torch.set_num_threads(args.num_threads)
    mdir = Path(args.manifest_dir)
    out_dir = Path(args.output_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    recs = load_manifest(mdir / f"{args.prefix}_recordings_{args.split}.jsonl.gz")
    sups = load_manifest(mdir / f"{args.prefix}_supervisions_{args.split}.jsonl.gz")
    cuts = CutSet.from_manifests(recordings=recs, supervisions=sups).trim_to_supervisions(keep_overlapping=False)
    # the one feature config's rate (e.g. 8 kHz telephone or 48 kHz recordings of test_real)
    cuts = cuts.map(at_feature_rate)
    if args.speed_perturb:
        cuts = cuts + cuts.perturb_speed(0.9) + cuts.perturb_speed(1.1)
    cuts = cuts.to_eager()

    extractor = lhotse_fbank()
    storage_path = out_dir / f"{args.prefix}_feats_{args.split}"
    done = []
    skipped = 0
    with LilcomChunkyWriter(storage_path) as writer:
        for cut in tqdm(cuts, desc=f"fbank {args.prefix} {args.split}", mininterval=5):
            try:
                audio = cut.load_audio()
                if audio.size == 0 or cut.duration <= 0:
                    raise ValueError("empty audio")
                done.append(cut.compute_and_store_features(extractor, writer))
            except Exception as e:
                skipped += 1
                reason = (str(e).strip().splitlines() or [""])[0][:200]
                logging.warning(f"Skipping cut {cut.id}: cannot compute features ({type(e).__name__}: {reason})")
    out = out_dir / f"{args.prefix}_cuts_{args.split}.jsonl.gz"
    CutSet.from_cuts(done).to_file(out)
    logging.info(f"Wrote {out}: {len(done)} cuts, {skipped} skipped")
    if not done:
        raise SystemExit(f"No cut of {args.split} has features")


if __name__ == "__main__":
    main()
