#!/usr/bin/env python3
"""Train the token n-gram LMs of beam-search shallow fusion, one per output mode.

Usage:
  ./local/train_lm.py --cuts data/synth/fbank/synth_cuts_train.jsonl.gz \
      --bpe-model data/synth/lang_bpe_256/bpe.model --out-dir exp/onnx --order 5 --prune 0,0,1,1,1

Writes ``lm-P.arpa.gz`` (the P references' pieces: cased, punctuated) and
``lm-N.arpa.gz`` (the N references') to ``--out-dir``: interpolated
Kneser-Ney (``zipformer_pc.lm``), ARPA format.  ``--prefix lodr --order 2
--prune ''`` writes the LODR bigrams ``lodr-P.arpa.gz`` / ``lodr-N.arpa.gz``
instead, which beam search subtracts (they stand for the predictor's
internal LM: train them on the transducer's own training references).  Put them beside an ONNX
export and ``python -m zipformer_pc.transcribe --decoding-method modified_beam_search``
fuses them (``--lm-scale``).  Only training references belong here: an LM
that has read the test text would make the test figures meaningless.
Speed-perturbed copies (cut ids ending in ``_spF``) are read once.
"""

import argparse
import logging
import time
from pathlib import Path

from zipformer_pc.data.references import SupervisionsOnce, get_n, get_p
from zipformer_pc.data.tokenizer import Tokenizer
from zipformer_pc.lm import LM_PREFIXES, NgramLm
from zipformer_pc.logs import setup_logging

MODES = ("P", "N")


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cuts", required=True, nargs="+", help="training cut manifests")
    p.add_argument("--bpe-model", required=True, help="the model's sentencepiece tokenizer")
    p.add_argument("--out-dir", type=Path, required=True)
    p.add_argument("--order", type=int, default=5)
    p.add_argument("--prune", default="0,0,1,1,1",
                   help="per order from 1: drop n-grams seen at most this often (empty: keep all)")
    p.add_argument("--modes", default="P,N", help="comma list of the modes to train an LM for")
    p.add_argument("--prefix", choices=LM_PREFIXES, default="lm",
                   help="the files' names, PREFIX-MODE.arpa.gz: lm (fused) or lodr (the low-order LM subtracted)")
    return p


def main(argv=None) -> None:
    setup_logging()
    args = get_parser().parse_args(argv)
    modes = [m for m in args.modes.split(",") if m]
    bad = [m for m in modes if m not in MODES]
    if bad or not modes:
        raise SystemExit(f"--modes takes P and/or N, got {args.modes!r}")
    try:
        prune = [int(x) for x in args.prune.split(",") if x.strip()]
    except ValueError:
        raise SystemExit(f"--prune takes comma-separated counts, got {args.prune!r}")
    if args.order < 1 or len(prune) > args.order or any(x < 0 for x in prune):
        raise SystemExit(f"--order must be at least 1 and --prune at most {args.order} non-negative counts")
    tok = Tokenizer(args.bpe_model)
    pieces = tok.pieces
    special = {pieces[tok.blank_id], pieces[tok.unk_id], "<sos/eos>"}
    texts = {m: [] for m in modes}
    sups = SupervisionsOnce(args.cuts)
    for sup in sups:
        for m in modes:
            text = get_p(sup) if m == "P" else get_n(sup)
            if text:
                texts[m].append(text)
    if sups.copies:
        logging.info("Read %d cuts once; %d speed-perturbed copies not counted again", sups.cuts, sups.copies)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    for m in modes:
        if not texts[m]:
            raise SystemExit(f"no {m} references in {' '.join(args.cuts)}")
        t0 = time.time()
        lm = NgramLm.train((tok.sp.encode(t, out_type=str) for t in texts[m]), args.order,
                           vocab=[p for p in pieces if p not in special], prune=prune)
        out = args.out_dir / f"{args.prefix}-{m}.arpa.gz"
        lm.write_arpa(out)
        logging.info("%s: %d references, %d-gram LM with %s n-grams per order (%.0f s), %.1f MB -> %s", m,
                     len(texts[m]), args.order, lm.counts(), time.time() - t0, out.stat().st_size / 1e6, out)


if __name__ == "__main__":
    main()
