#!/usr/bin/env python3
"""Accuracy of the streaming runtime over a grid of search settings.

Usage:
  # the blank penalties of docs/decoding-extras.md's table, greedy and beam search (with the LMs of the model dir)
  python research/search_grid.py --model-dir egs/synth/pretrained \
      --cuts data/synth/fbank/synth_cuts_dev.jsonl.gz \
      --decoding-methods greedy_search,modified_beam_search --blank-penalties 0,0.5,1,1.5

Every cell (decoding method x blank penalty) decodes the same utterances with
:class:`zipformer_pc.runtime.StreamingRecognizer` (as ``python -m zipformer_pc.transcribe
--cuts`` does, 0.1 s pieces; the other search options as that command's, e.g.
``--lm-scale`` and ``--questions``) and scores them with ``zipformer_pc.metrics``.
The audio is read once.  Prints a markdown table (WER from N; PC-WER, PuncER,
CaseER and PER from P; RTF) and writes the figures with ``--output-json``.
Picks nothing and asserts nothing: read the table on ``dev``, then confirm on
``test``.
"""

import argparse
import copy
import json
import logging
import sys
from pathlib import Path
from typing import Dict, List

from zipformer_pc.logs import setup_logging
from zipformer_pc.metrics import fmt
from zipformer_pc.options import check_blank_penalty
from zipformer_pc.runtime import utterances
from zipformer_pc.runtime.recognizer import StreamingRecognizer, add_search_options, search_kwargs

ROOT = Path(__file__).resolve().parents[1]

METHODS = ("greedy_search", "modified_beam_search")


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model-dir", type=Path, default=ROOT / "egs/synth/pretrained",
                   help="streaming ONNX export (python -m zipformer_pc.export's layout) [egs/synth/pretrained]")
    p.add_argument("--cuts", required=True, help="lhotse cut manifest with N (and P) references")
    p.add_argument("--max-utts", type=int, default=0, help="the first this many cuts (0: all)")
    p.add_argument("--decoding-methods", default="greedy_search,modified_beam_search",
                   help=f"comma list of {', '.join(METHODS)}")
    p.add_argument("--blank-penalties", default="0,0.5,1,1.5", help="comma list of --blank-penalty values")
    p.add_argument("--num-threads", type=int, default=1, help="encoder intra-op threads")
    p.add_argument("--int8", action="store_true", help="the int8 models")
    p.add_argument("--piece-seconds", type=float, default=0.1)
    p.add_argument("--output-json", type=Path, default=None)
    add_search_options(p)  # --beam-size, --lm-scale, --lm-token-bonus, --lodr-scale, --questions (a grid value wins)
    return p


def parse_grid(args) -> List[Dict[str, object]]:
    methods = [m for m in args.decoding_methods.split(",") if m]
    bad = [m for m in methods if m not in METHODS]
    if bad or not methods:
        raise SystemExit(f"--decoding-methods: {bad or 'none given'}; choose from {', '.join(METHODS)}")
    try:
        penalties = [check_blank_penalty(float(x)) for x in args.blank_penalties.split(",") if x.strip()]
    except ValueError as e:
        raise SystemExit(f"--blank-penalties: {e}")
    if not penalties:
        raise SystemExit("--blank-penalties: none given")
    return [{"decoding_method": m, "blank_penalty": b} for m in methods for b in penalties]


def row(cell: Dict[str, object], scores: Dict[str, dict], rtf: float) -> Dict[str, object]:
    n, p = scores.get("N", {}), scores.get("P", {})
    return {**cell, "wer": n.get("wer"), "pc_wer": p.get("pc_wer"), "punc_er": p.get("punc_er"),
            "case_er": p.get("case_er"), "per": p.get("per"), "rtf": rtf,
            "utts": n.get("num_utts", p.get("num_utts", 0))}


def table(rows: List[Dict[str, object]]) -> str:
    lines = ["| search | blank penalty | WER (N) | PC-WER | PuncER | CaseER | PER | RTF |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        search = "greedy" if r["decoding_method"] == "greedy_search" else f"beam {r['beam']}" + \
            (f" + LMs {r['lm_scale']:g}" if r["lm_scale"] else "") + \
            (f" - LODR {r['lodr_scale']:g}" if r.get("lodr_scale") else "")
        lines.append(f"| {search} | {r['blank_penalty']:g} | {fmt(r['wer'])} | {fmt(r['pc_wer'])} | "
                     f"{fmt(r['punc_er'])} | {fmt(r['case_er'])} | {fmt(r['per'])} | {r['rtf']:.3f} |")
    return "\n".join(lines)


def main(argv=None) -> List[Dict[str, object]]:
    args = get_parser().parse_args(argv)
    setup_logging()
    grid = parse_grid(args)
    utts = utterances.read_once(utterances.from_cuts(args.cuts, args.max_utts))
    if not utts:
        raise SystemExit(f"{args.cuts}: no utterance to decode")
    rows = []
    for i, cell in enumerate(grid, 1):
        ns = copy.copy(args)
        for k, v in cell.items():
            setattr(ns, k, v)
        kw = search_kwargs(ns, args.model_dir)
        rec = StreamingRecognizer.from_dir(args.model_dir, args.int8, num_threads=args.num_threads, **kw)
        logging.info("cell %d/%d: %s, blank penalty %g (%d utterances)", i, len(grid), cell["decoding_method"],
                     cell["blank_penalty"], len(utts))
        run = utterances.decode(rec, utts, args.piece_seconds, progress_every=0)
        rows.append(row({**cell, "beam": kw["beam"], "lm_scale": kw["lm_scale"],
                         "lm_token_bonus": kw["lm_token_bonus"], "lodr_scale": kw["lodr_scale"],
                         "questions": rec.questions is not None},
                        utterances.score(run.decoded), run.rtf))
    print(f"{args.cuts}: {len(utts)} utterances, model {args.model_dir}, {args.num_threads} encoder thread(s)")
    print(table(rows))
    if args.output_json:
        args.output_json.write_text(json.dumps({"rows": rows, "cuts": str(args.cuts), "model_dir": str(args.model_dir),
                                                "command": sys.argv}, indent=1) + "\n")
    return rows


if __name__ == "__main__":
    main()
