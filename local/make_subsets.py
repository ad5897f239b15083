#!/usr/bin/env python3
"""Filter the training cuts and build the punctuated-proportion subsets.

Usage:
  ./local/make_subsets.py --cuts data/synth/fbank/synth_cuts_train.jsonl.gz \
      --bpe-model data/synth/lang_bpe_256/bpe.model \
      --proportions 1.0,0.5,0.35,0.2,0.05 --seed 42 --subset-dir data/synth/subsets

1. Filter: cuts shorter than ``--min-duration`` or longer than
   ``--max-duration`` seconds, and cuts whose P or N token count exceeds the
   encoder's output frames (((T - 7) // 2 + 1) // 2 at 25 Hz), are removed
   and counted; the kept cuts are written to ``..._cuts_train_filtered``.
2. Subsets: for each proportion f, exactly round(f * K) of the K cuts that
   have a P reference keep it; the others keep only N (zipformer_pc.data.references).
   Cuts are ranked by sha256(seed, cut id) and each subset takes a prefix of
   the ranking, so subsets are reproducible and nested (5% inside 20% inside
   35% ...).  Writes ``{prefix}_cuts_train_p{f}.jsonl.gz`` beside the input
   and the chosen ids to ``{subset_dir}/punct_ids_p{f}.txt``.
"""

import argparse
import hashlib
import json
import logging
from pathlib import Path
from typing import List

from zipformer_pc.data.references import get_n, get_p, has_p, withhold_p
from zipformer_pc.features import encoder_frames
from zipformer_pc.logs import setup_logging


def rank_key(seed: int, cut_id: str) -> bytes:
    return hashlib.sha256(f"{seed}:{cut_id}".encode()).digest()


def subset_name(f: float) -> str:
    return f"p{f:g}"


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cuts", required=True, help="Training cuts with features (…_cuts_train.jsonl.gz)")
    p.add_argument("--bpe-model", required=True)
    p.add_argument("--proportions", default="1.0,0.5,0.35,0.2,0.05")
    p.add_argument("--subset-dir", required=True)
    p.add_argument("--min-duration", type=float, default=1.0)
    p.add_argument("--max-duration", type=float, default=20.0)
    p.add_argument("--seed", type=int, default=42)
    return p


def main() -> None:
    setup_logging()
    args = get_parser().parse_args()
    import sentencepiece as spm
    from lhotse import CutSet, load_manifest

    proportions: List[float] = sorted({float(x) for x in args.proportions.split(",")}, reverse=True)
    for f in proportions:
        if not 0.0 <= f <= 1.0:
            raise SystemExit(f"Proportions must be in [0, 1], got {f}")
    sp = spm.SentencePieceProcessor(model_file=args.bpe_model)
    cuts = load_manifest(args.cuts)
    cuts_path = Path(args.cuts)
    stem = cuts_path.name.replace(".jsonl.gz", "")

    kept = []
    removed = {"too_short": 0, "too_long": 0, "too_many_tokens": 0}
    for c in cuts:
        if c.duration < args.min_duration:
            removed["too_short"] += 1
            continue
        if c.duration > args.max_duration:
            removed["too_long"] += 1
            continue
        frames = encoder_frames(c.num_frames)
        texts = [get_n(s) for s in c.supervisions] + [get_p(s) or "" for s in c.supervisions]
        if max(len(sp.encode(t)) for t in texts) > frames:
            removed["too_many_tokens"] += 1
            logging.info(f"Removing {c.id}: more tokens than encoder frames ({frames})")
            continue
        kept.append(c)
    logging.info(f"Filter: kept {len(kept)} of {len(cuts)} cuts; removed {removed}")
    filtered = CutSet.from_cuts(kept)
    filtered.to_file(cuts_path.parent / f"{stem}_filtered.jsonl.gz")

    with_p = sorted((c for c in kept if has_p(c)), key=lambda c: rank_key(args.seed, c.id))
    subset_dir = Path(args.subset_dir)
    subset_dir.mkdir(parents=True, exist_ok=True)
    summary = {"seed": args.seed, "num_cuts": len(kept), "num_with_p": len(with_p), "removed": removed, "subsets": {}}
    for f in proportions:
        k = round(f * len(with_p))
        chosen = {c.id for c in with_p[:k]}
        name = subset_name(f)
        (subset_dir / f"punct_ids_{name}.txt").write_text("".join(f"{i}\n" for i in sorted(chosen)))
        out = CutSet.from_cuts(c if c.id in chosen else withhold_p(c) for c in kept)
        out.to_file(cuts_path.parent / f"{stem}_{name}.jsonl.gz")
        summary["subsets"][name] = {"proportion": f, "cuts_with_p": k}
        logging.info(f"Subset {name}: {k} of {len(kept)} cuts keep their P reference")
    (subset_dir / "subsets.json").write_text(json.dumps(summary, indent=1) + "\n")


if __name__ == "__main__":
    main()
