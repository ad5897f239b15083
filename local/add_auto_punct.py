#!/usr/bin/env python3
"""Add automatically punctuated P' references to a cut manifest.

Usage:
  ./local/add_auto_punct.py --checkpoint data/synth/restore/best-valid-loss.pt \
      --cuts-in data/synth/fbank/synth_cuts_train_p0.2.jsonl.gz \
      --cuts-out data/synth/fbank/synth_cuts_train_p0.2_pauto.jsonl.gz

Every supervision gets ``custom["text_p_auto"]`` = the restoration model's
P of its N text (``supervision.text``), which ``zipformer_pc.training.train
--use-auto-punct true`` trains on (zipformer_pc.data.references.get_p(sup,
use_auto_punct=True)).  The true P (``custom["text_p"]``) and everything else
are kept as they are, and every cut is written, in the input order.
Supervisions whose N text has no word get no P' and are counted (the log
names the first few).  Inference has no randomness, and the output is
gzipped with a zero timestamp, so the same model and input give a
byte-identical file.  ``--onnx`` uses the ONNX export instead of the
checkpoint.
"""

import argparse
import json
import logging
import os
from collections import Counter
from pathlib import Path
from typing import List

from zipformer_pc.data.references import AUTO_PUNCT_KEY, P_KEY, get_n
from zipformer_pc.files import text_writer
from zipformer_pc.logs import setup_logging
from zipformer_pc.restoration.model import load_restorer


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--checkpoint", help="Restoration checkpoint (python -m zipformer_pc.restoration.train)")
    g.add_argument("--onnx", help="Restoration ONNX export (python -m zipformer_pc.restoration.export)")
    p.add_argument("--cuts-in", required=True, help="Input cut manifest (.jsonl.gz)")
    p.add_argument("--cuts-out", required=True, help="Output cut manifest (.jsonl.gz)")
    p.add_argument("--chunk-size", type=int, default=512, help="Cuts restored together")
    p.add_argument("--batch-size", type=int, default=64, help="Lines per network batch")
    p.add_argument("--num-threads", type=int, default=1)
    return p


def main() -> None:
    setup_logging()
    args = get_parser().parse_args()
    from lhotse import load_manifest_lazy

    if not args.cuts_out.endswith(".jsonl.gz"):
        raise SystemExit(f"--cuts-out must end with .jsonl.gz, got {args.cuts_out}")
    if Path(args.cuts_in).resolve() == Path(args.cuts_out).resolve():
        raise SystemExit("--cuts-out must differ from --cuts-in")
    restorer = load_restorer(args.checkpoint, args.onnx, args.num_threads)
    out = Path(args.cuts_out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name[: -len(".jsonl.gz")] + ".tmp.jsonl.gz")
    counts = Counter()
    skipped: List[str] = []
    with text_writer(tmp) as f:
        chunk: List = []
        for cut in load_manifest_lazy(args.cuts_in):
            chunk.append(cut)
            if len(chunk) == args.chunk_size:
                write_chunk(chunk, restorer, args.batch_size, f, counts, skipped)
                logging.info(f"{counts['cuts']} cuts done")
                chunk = []
        if chunk:
            write_chunk(chunk, restorer, args.batch_size, f, counts, skipped)
    written = sum(1 for _ in load_manifest_lazy(tmp))
    if written != counts["cuts"]:
        raise SystemExit(f"Wrote {written} cuts but read {counts['cuts']}; {tmp} left for inspection")
    os.replace(tmp, out)
    if skipped:
        logging.warning(f"{len(skipped)} supervision(s) have no word in their N text and got no P', e.g. {skipped[:5]}")
    logging.info(f"Wrote {out}: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))


def write_chunk(cuts, restorer, batch_size: int, f, counts: Counter, skipped: List[str]) -> None:
    """Restore the N text of every supervision of ``cuts`` and write the cuts as JSON lines."""
    from lhotse.utils import fastcopy

    sups = [s for c in cuts for s in c.supervisions]
    restored = dict(zip((s.id for s in sups), restorer.restore([get_n(s) for s in sups], batch_size)))

    def add(sup):
        counts["supervisions"] += 1
        custom = dict(sup.custom or {})
        counts["with_true_p"] += int(P_KEY in custom)
        counts["replaced_old_auto_punct"] += int(custom.pop(AUTO_PUNCT_KEY, None) is not None)
        if restored[sup.id]:
            custom[AUTO_PUNCT_KEY] = restored[sup.id]
            counts["restored"] += 1
        else:
            counts["skipped_no_words"] += 1
            skipped.append(sup.id)
        return fastcopy(sup, custom=custom or None)

    for cut in cuts:
        f.write(json.dumps(cut.map_supervisions(add).to_dict(), ensure_ascii=False) + "\n")
        counts["cuts"] += 1


if __name__ == "__main__":
    main()
