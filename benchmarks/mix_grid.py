#!/usr/bin/env python3
"""Which mix of fine-tuned runs and the weights they started from to keep: a grid measured on dev sets.

Usage:
  # a run mixed with the shipped weights at three weights, and a soup of two runs (0.4 / 0.2, the start 0.4)
  python benchmarks/mix_grid.py --exp-dir EXP_A/conditioned EXP_B/conditioned --iter 3671 3309 \\
      --weights 1,0 0.7,0 0.5,0 0.4,0.2 --start egs/synth/pretrained/conditioned.pt \\
      --cuts dev=data/synth/fbank/synth_cuts_dev.jsonl.gz dev_ood=data/synth/fbank/synth_cuts_dev_ood.jsonl.gz \\
      --work-dir /tmp/mix_grid

Each weight set (one weight per run, comma-separated; the start gets 1 minus
their sum) is written by ``zipformer_pc.training.interpolate`` (the runs'
``--iter B --avg A`` weights), exported for streaming as the shipped model is
(fp32, ``--chunk-size`` / ``--left-context-frames``), given the text models of
``--model-dir`` (token LMs, LODR bigrams, question model) and decoded on every
``--cuts`` set by the runtime (:class:`zipformer_pc.runtime.StreamingRecognizer`,
0.1 s pieces; beam search with 4 paths and the LMs unless told otherwise, as
users run it).  ``--model-dir`` itself, decoded the same way, is the reference
row.  A mix *passes* when it is not worse than the reference on any figure (WER
of N, PC-WER and PER of P, on every set); the pick is the passing mix with the
lowest PC-WER summed over the sets, or none (keep the reference).  Prints a
markdown table and the pick; ``--output-json`` keeps them.  For choosing on dev
sets (``dev`` and ``dev_ood``): measure the pick once on the test sets afterwards.
"""

import argparse
import json
import logging
import shutil
import sys
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from zipformer_pc.export import onnx_export  # noqa: E402
from zipformer_pc.lm import LM_PREFIXES, find_lm  # noqa: E402
from zipformer_pc.metrics import fmt  # noqa: E402
from zipformer_pc.modes import RUNTIME_ORDER  # noqa: E402
from zipformer_pc.questions import FILE_NAME as QUESTIONS  # noqa: E402
from zipformer_pc.runtime import utterances  # noqa: E402
from zipformer_pc.runtime.recognizer import StreamingRecognizer, add_search_options, search_kwargs  # noqa: E402
from zipformer_pc.training import interpolate  # noqa: E402

# (key of the row, mode, key of the metrics summary): each is better lower
FIGURES = (("wer", "N", "wer"), ("pc_wer", "P", "pc_wer"), ("per", "P", "per"))
REFERENCE = "reference"


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    interpolate.add_run_options(p, start=ROOT / "egs/synth/pretrained/conditioned.pt")
    p.add_argument("--weights", nargs="+", required=True,
                   help="weight sets, one weight per run each, comma-separated (e.g. 0.7 for one run, 0.4,0.2 "
                        "for two)")
    p.add_argument("--model-dir", type=Path, default=ROOT / "egs/synth/pretrained",
                   help="the reference export, whose tokens and text models the mixes get [egs/synth/pretrained]")
    p.add_argument("--cuts", nargs="+", required=True, help="NAME=MANIFEST sets to decode (cuts with references)")
    p.add_argument("--max-utts", type=int, default=0, help="the first this many cuts of each set (0: all)")
    p.add_argument("--work-dir", type=Path, required=True, help="written: one directory per mix (weights, ONNX)")
    p.add_argument("--chunk-size", type=int, default=32)
    p.add_argument("--left-context-frames", type=int, default=128)
    p.add_argument("--num-threads", type=int, default=1, help="encoder intra-op threads")
    p.add_argument("--output-json", type=Path, default=None)
    add_search_options(p)
    p.set_defaults(decoding_method="modified_beam_search")
    return p


def parse_weights(sets: Sequence[str], runs: int) -> List[Tuple[float, ...]]:
    out = []
    for s in sets:
        try:
            ws = tuple(float(x) for x in s.split(","))
        except ValueError:
            raise SystemExit(f"--weights {s!r}: not a comma-separated list of numbers")
        try:
            interpolate.check_weights(ws, runs)
        except ValueError as e:
            raise SystemExit(f"--weights {s!r}: {e}")
        if ws in out:
            raise SystemExit(f"--weights {s!r}: given twice")
        out.append(ws)
    return out


def parse_sets(items: Sequence[str]) -> Dict[str, Path]:
    sets = {}
    for item in items:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise SystemExit(f"--cuts {item!r}: give NAME=MANIFEST")
        if name in sets or name == REFERENCE:
            raise SystemExit(f"--cuts: the set name {name!r} is given twice or reserved")
        if not Path(path).is_file():
            raise SystemExit(f"--cuts {item!r}: {path} does not exist")
        sets[name] = Path(path)
    return sets


def tag(weights: Tuple[float, ...]) -> str:
    return "/".join(f"{w:g}" for w in weights)


def passes(row: Dict[str, Dict[str, float]], ref: Dict[str, Dict[str, float]]) -> bool:
    """Not worse than the reference on any figure of any set."""
    return all(row[s][k] is not None and ref[s][k] is not None and row[s][k] <= ref[s][k]
               for s in ref for k, _, _ in FIGURES)


def pick(rows: Dict[str, Dict[str, Dict[str, float]]]) -> Optional[str]:
    """The passing mix with the lowest PC-WER summed over the sets (the first of equals), or None."""
    ref = rows[REFERENCE]
    ok = [name for name, r in rows.items() if name != REFERENCE and passes(r, ref)]
    return min(ok, key=lambda name: sum(rows[name][s]["pc_wer"] for s in ref), default=None)


def write_mix(args, weights: Tuple[float, ...], out: Path) -> Path:
    """The mix's weights (interpolate) and its streaming export with the reference's text models."""
    interpolate.main(["--exp-dir", *map(str, args.exp_dir), "--iter", *map(str, args.iter), "--avg", str(args.avg),
                      "--start", str(args.start), "--weight", *map(str, weights), "--out-dir", str(out / "model")])
    onnx = out / "onnx"
    shutil.rmtree(onnx, ignore_errors=True)
    onnx_export.main(["--exp-dir", str(out / "model"), "--iter", str(args.iter[0]), "--avg", "1",
                      "--tokens", str(args.model_dir / "tokens.txt"), "--chunk-size", str(args.chunk_size),
                      "--left-context-frames", str(args.left_context_frames), "--output-dir", str(onnx)])
    # what the runtime reads beside the ONNX files: each mode's token LM and LODR bigram, the question model
    lms = [find_lm(args.model_dir, mode, prefix) for prefix in LM_PREFIXES for mode in RUNTIME_ORDER]
    for f in [f for f in lms if f is not None] + sorted(args.model_dir.glob(QUESTIONS)):
        shutil.copy2(f, onnx / f.name)
    return onnx


def measure(args, model_dir: Path, sets: Dict[str, List[utterances.Utterance]]) -> Dict[str, Dict[str, float]]:
    rec = StreamingRecognizer.from_dir(model_dir, False, num_threads=args.num_threads, **search_kwargs(args, model_dir))
    row = {}
    for name, utts in sets.items():
        scores = utterances.score(utterances.decode(rec, utts, progress_every=0).decoded)
        row[name] = {k: scores.get(mode, {}).get(key) for k, mode, key in FIGURES}
    return row


def table(rows: Dict[str, Dict[str, Dict[str, float]]], chosen: Optional[str]) -> str:
    names = list(rows[REFERENCE])
    lines = ["| weights | " + " | ".join(f"`{n}` WER / PC-WER / PER" for n in names) + " | passes |",
             "|---|" + "---|" * len(names) + "---|"]
    ref = rows[REFERENCE]
    for name, r in rows.items():
        cells = [" / ".join(fmt(r[n][k]) for k, _, _ in FIGURES) for n in names]
        mark = "" if name == REFERENCE else ("yes" if passes(r, ref) else "no") + (", picked" if name == chosen else "")
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {mark} |")
    return "\n".join(lines)


def main(argv=None) -> Dict[str, object]:
    args = get_parser().parse_args(argv)
    logging.basicConfig(format="%(asctime)s %(levelname)s [mix_grid] %(message)s", level=logging.INFO)
    if len(args.exp_dir) != len(args.iter):
        raise SystemExit(f"give one --iter per --exp-dir: {len(args.exp_dir)} run(s), {len(args.iter)} --iter")
    grid = parse_weights(args.weights, len(args.exp_dir))
    manifests = parse_sets(args.cuts)
    if not (args.model_dir / "tokens.txt").is_file():
        raise SystemExit(f"--model-dir {args.model_dir}: no tokens.txt (an export's directory is needed)")
    sets = {name: utterances.read_once(utterances.from_cuts(path, args.max_utts)) for name, path in manifests.items()}
    empty = [name for name, utts in sets.items() if not utts]
    if empty:
        raise SystemExit(f"--cuts: no utterance to decode in {', '.join(empty)}")
    logging.info("reference %s on %s", args.model_dir, ", ".join(f"{n} ({len(u)} utts)" for n, u in sets.items()))
    rows = {REFERENCE: measure(args, args.model_dir, sets)}
    for i, weights in enumerate(grid, 1):
        name = tag(weights)
        logging.info("mix %d/%d: weights %s (the start %g)", i, len(grid), name, 1 - sum(weights))
        onnx = write_mix(args, weights, args.work_dir / f"mix-{name.replace('/', '-')}")
        rows[name] = measure(args, onnx, sets)
    chosen = pick(rows)
    print(f"Runs {' '.join(map(str, args.exp_dir))} (--iter {' '.join(map(str, args.iter))} --avg {args.avg}), "
          f"start {args.start}; reference {args.model_dir}; {args.decoding_method}")
    print(table(rows, chosen))
    print(f"Pick: {chosen}" if chosen else "Pick: none (no mix is as good as the reference on every figure)")
    result = {"rows": rows, "pick": chosen, "sets": {n: str(p) for n, p in manifests.items()},
              "search": search_kwargs(args, args.model_dir), "command": sys.argv}
    if args.output_json:
        args.output_json.write_text(json.dumps(result, indent=1) + "\n")
    return result


if __name__ == "__main__":
    main()
