#!/usr/bin/env python3
"""Restore case and punctuation of N text with the restoration model: the
cascade's hypotheses (:func:`cascade_restore`) or text files (the command line).

Usage:
  python -m zipformer_pc.restoration.apply --checkpoint egs/synth/exp/restore_default/best-valid-loss.pt \
      --has-ids true --input hyps_n.txt --output hyps_p.txt
  echo "why does not perry see her" | python -m zipformer_pc.restoration.apply --onnx restore.onnx

Input lines are text (``--has-ids false``) or Kaldi-style ``utt_id text``
(``utt_id<TAB>text`` or ``utt_id text``; ``--has-ids true``), from
``--input`` or stdin; any text is normalized first (zipformer_pc.text), so
cased or punctuated input works too.  Output has one line per input line,
in order (``utt_id<TAB>P`` with ids).  A line with no word (blank, or only
punctuation) gives an empty output line and is counted in the log.
"""

import argparse
import logging
import sys
import time
from typing import Dict, Mapping

from zipformer_pc.logs import setup_logging
from zipformer_pc.options import str2bool
from zipformer_pc.restoration.model import load_restorer
from zipformer_pc.runtime.restoration import BaseRestorer


def cascade_restore(hyps: Mapping[str, str], restorer: BaseRestorer, batch_size: int = 64) -> Dict[str, str]:
    """Cascade decoding: P hypotheses from N hypotheses (``utt_id -> text``), in the same order.

    An empty N hypothesis gives an empty P hypothesis.
    """
    ids = list(hyps)
    restored = restorer.restore([hyps[i] for i in ids], batch_size)
    empty = sum(1 for r in restored if not r)
    if empty:
        logging.info(f"cascade_restore: {empty} of {len(ids)} hypotheses are empty and stay empty")
    return dict(zip(ids, restored))


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--checkpoint", help="Restoration checkpoint (python -m zipformer_pc.restoration.train)")
    g.add_argument("--onnx", help="Restoration ONNX export (python -m zipformer_pc.restoration.export)")
    p.add_argument("--input", default="-", help="Input file, '-' for stdin")
    p.add_argument("--output", default="-", help="Output file, '-' for stdout")
    p.add_argument("--has-ids", type=str2bool, default=False, help="Lines are 'utt_id text'")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--num-threads", type=int, default=1)
    return p


def split_id(line: str, lineno: int) -> tuple:
    """``(utt_id, text)`` of a Kaldi-style line; the separator is a tab if there is one, else a space."""
    if "\t" in line:
        utt_id, text = line.split("\t", 1)
    else:
        parts = line.split(None, 1)
        utt_id, text = (parts[0], parts[1] if len(parts) > 1 else "") if parts else ("", "")
    if not utt_id.strip():
        raise SystemExit(f"line {lineno}: no utterance id (--has-ids true): {line[:80]!r}")
    return utt_id.strip(), text


def main() -> None:
    setup_logging()
    args = get_parser().parse_args()
    try:
        if args.input == "-":
            lines = sys.stdin.read().splitlines()
        else:
            with open(args.input, encoding="utf-8") as f:
                lines = f.read().splitlines()
    except UnicodeDecodeError as e:
        raise SystemExit(f"{args.input}: not UTF-8 text (byte offset {e.start})") from None
    ids = None
    if args.has_ids:
        pairs = [split_id(line, i) for i, line in enumerate(lines, 1)]
        ids = [u for u, _ in pairs]
        lines = [t for _, t in pairs]
    restorer = load_restorer(args.checkpoint, args.onnx, args.num_threads)
    start = time.time()
    restored = restorer.restore(lines, args.batch_size)
    elapsed = time.time() - start
    empty = sum(1 for r in restored if not r)
    if empty:
        logging.warning(f"{empty} of {len(lines)} line(s) have no word and are written empty")
    out = sys.stdout if args.output == "-" else open(args.output, "w", encoding="utf-8")
    try:
        for i, text in enumerate(restored):
            out.write((f"{ids[i]}\t" if ids is not None else "") + text + "\n")
    finally:
        if out is not sys.stdout:
            out.close()
    words = sum(len(r.split()) for r in restored)
    logging.info(f"Restored {len(lines)} lines ({words} words) in {elapsed:.2f} s")


if __name__ == "__main__":
    main()
