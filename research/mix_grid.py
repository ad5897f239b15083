#!/usr/bin/env python3
"""Which mix of fine-tuned runs and the weights they started from to keep: a grid measured on dev sets.

Usage:
  # a run mixed with the shipped weights at three weights, and a soup of two runs (0.4 / 0.2, the start 0.4)
  python research/mix_grid.py --exp-dir EXP_A/conditioned EXP_B/conditioned --iter 3671 3309 \\
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
row.  The figures: WER of N, PC-WER and PER of P, on every set.  A mix *passes*
(``--rule bootstrap``, the default) when a paired bootstrap over each set's
utterances (:func:`zipformer_pc.metrics.paired_bootstrap`, ``--resamples``,
``--seed``) finds it worse than the reference on no figure with probability
``--confidence`` (0.95) or more, and its PC-WER summed over the sets is below
the reference's; ``--rule strict``: it is worse on no figure at all (on sets of
~150 utterances a PER moves by a point between equally good models, so that
rule mostly rejects by noise).  The pick is the passing mix with the lowest
PC-WER summed over the sets, or none (keep the reference).  Prints a markdown
table (a figure the bootstrap finds worse is marked ``+``) and the pick;
``--output-json`` keeps them with the bootstrap's shares, and each mix's
directory (``reference/`` for the reference) its hypotheses per set
(``hyps-NAME.tsv``, the runtime's ``id<TAB>mode<TAB>text``: ``scoring/score.py
--compare`` reads them).  The reference's hypotheses are kept with a key
(``reference/key.json``: its files, the sets and the search); a later call
with the same work directory and the same key scores them again instead of
decoding them again.  For choosing on dev sets (``dev`` and ``dev_ood``):
measure the pick once on the test sets afterwards.
"""

import argparse
import json
import logging
import shutil
import sys
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from zipformer_pc.export import onnx_export
from zipformer_pc.layout import DEFAULT_CHUNK_SIZE, DEFAULT_LEFT_CONTEXT_FRAMES
from zipformer_pc.lm import LM_PREFIXES, find_lm
from zipformer_pc.logs import setup_logging
from zipformer_pc.metrics import fmt, paired_bootstrap
from zipformer_pc.modes import RUNTIME_ORDER
from zipformer_pc.questions import FILE_NAME as QUESTIONS
from zipformer_pc.runtime import utterances
from zipformer_pc.runtime.recognizer import StreamingRecognizer, add_search_options, search_kwargs
from zipformer_pc.training import interpolate
from zipformer_pc.training.encoder_cache import file_digest
from zipformer_pc.transcripts import read_transcripts

ROOT = Path(__file__).resolve().parents[1]

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
    p.add_argument("--chunk-size", type=int, default=DEFAULT_CHUNK_SIZE)
    p.add_argument("--left-context-frames", type=int, default=DEFAULT_LEFT_CONTEXT_FRAMES)
    p.add_argument("--num-threads", type=int, default=1, help="encoder intra-op threads")
    p.add_argument("--output-json", type=Path, default=None)
    p.add_argument("--rule", choices=("bootstrap", "strict"), default="bootstrap",
                   help="bootstrap: worse on no figure by the paired bootstrap, and a lower PC-WER sum; "
                        "strict: worse on no figure at all [bootstrap]")
    p.add_argument("--confidence", type=float, default=0.95,
                   help="a figure is worse when the bootstrap finds it worse this often or more [0.95]")
    p.add_argument("--resamples", type=int, default=1000, help="resamples of the paired bootstrap [1000]")
    p.add_argument("--seed", type=int, default=0, help="seed of the paired bootstrap [0]")
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


def worse(row: Dict[str, dict], ref: Dict[str, dict], confidence: Optional[float]) -> List[Tuple[str, str]]:
    """The (set, figure) pairs on which a mix is worse than the reference: higher at all (``confidence``
    None, the strict rule) or in at least that share of the bootstrap's resamples; a missing figure is worse."""
    out = []
    for s in ref:
        for k, _, _ in FIGURES:
            if row[s][k] is None or ref[s][k] is None:
                out.append((s, k))
            elif confidence is None:
                if row[s][k] > ref[s][k]:
                    out.append((s, k))
            else:
                p = row[s].get("p_worse", {}).get(k)
                if p is None or p >= confidence:
                    out.append((s, k))
    return out


def passes(row: Dict[str, dict], ref: Dict[str, dict], confidence: Optional[float] = None) -> bool:
    """Worse on no figure (:func:`worse`); by the bootstrap, also a PC-WER sum below the reference's."""
    if worse(row, ref, confidence):
        return False
    return confidence is None or sum(row[s]["pc_wer"] for s in ref) < sum(ref[s]["pc_wer"] for s in ref)


def pick(rows: Dict[str, Dict[str, dict]], confidence: Optional[float] = None) -> Optional[str]:
    """The passing mix with the lowest PC-WER summed over the sets (the first of equals), or None."""
    ref = rows[REFERENCE]
    ok = [name for name, r in rows.items() if name != REFERENCE and passes(r, ref, confidence)]
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


def decoding_key(args, model_dir: Path, manifests: Dict[str, Path]) -> Dict[str, object]:
    """What a model's hypotheses depend on: its directory's files (by content; not its card, ``*.md``),
    each set's manifest (by content), the search and the streaming geometry. A directory decoded before
    with the same key is not decoded again (the reference, when a grid is measured in several calls)."""
    key = {"model": {f.name: file_digest(f) for f in sorted(model_dir.iterdir()) if f.is_file() and f.suffix != ".md"},
           "sets": {name: file_digest(path) for name, path in manifests.items()},
           "max_utts": args.max_utts, "chunk_size": args.chunk_size,
           "left_context_frames": args.left_context_frames, "search": search_kwargs(args, model_dir)}
    return json.loads(json.dumps(key, default=str))  # as key.json gives it back (paths as text)


def read_decoded(out: Path, name: str, utts: Sequence[utterances.Utterance]) -> List[utterances.Decoded]:
    """The hypotheses a call before wrote (hyps-NAME.tsv, read by :func:`read_transcripts`) given back to
    their utterances."""
    path = out / f"hyps-{name}.tsv"
    by_mode = {mode: read_transcripts(str(path), side="hyp", mode=mode) for mode in RUNTIME_ORDER}
    hyps = {u.uid: {mode: texts[u.uid] for mode, texts in by_mode.items() if u.uid in texts} for u in utts}
    missing = [uid for uid, h in hyps.items() if not h]
    if missing:
        raise ValueError(f"{path} lacks {len(missing)} utterance(s), e.g. {missing[0]}")
    return [utterances.Decoded(u, hyps[u.uid]) for u in utts]


def measure(args, model_dir: Path, sets: Dict[str, List[utterances.Utterance]], out: Path,
            against: Optional[dict] = None, cache_key: Optional[dict] = None) -> Tuple[Dict[str, dict], dict]:
    """One model's figures per set (and the bootstrap's share of resamples where it is worse than
    ``against``, the reference's scores) and its scores; the hypotheses go to ``out``/hyps-SET.tsv.
    With ``cache_key`` (:func:`decoding_key`), hypotheses written under the same key (``out``/key.json) are
    scored again instead of decoded again."""
    out.mkdir(parents=True, exist_ok=True)
    key_file = out / "key.json"
    reuse = (cache_key is not None and key_file.is_file() and json.loads(key_file.read_text()) == cache_key
             and all((out / f"hyps-{name}.tsv").is_file() for name in sets))
    if reuse:
        logging.info("%s: the hypotheses of %s, decoded before with the same model, sets and search", out, model_dir)
    else:
        key_file.unlink(missing_ok=True)
        rec = StreamingRecognizer.from_dir(model_dir, False, num_threads=args.num_threads,
                                           **search_kwargs(args, model_dir))
    row, corpora = {}, {}
    for name, utts in sets.items():
        if reuse:
            decoded = read_decoded(out, name, utts)
        else:
            decoded = utterances.decode(rec, utts, progress_every=0).decoded
            utterances.write_hyps(out / f"hyps-{name}.tsv", decoded)
        corpora[name] = utterances.score_corpora(decoded)
        summaries = {mode: c.summary() for mode, c in corpora[name].items()}
        row[name] = {k: summaries.get(mode, {}).get(key) for k, mode, key in FIGURES}
        if against is not None:
            row[name]["p_worse"] = {}
            for k, mode, key in FIGURES:
                a, b = against[name].get(mode), corpora[name].get(mode)
                boot = paired_bootstrap(a, b, [key], args.resamples, args.seed)[key] if a and b else {}
                row[name]["p_worse"][k] = boot.get("p_b_worse")
    if cache_key is not None and not reuse:
        key_file.write_text(json.dumps(cache_key, indent=1) + "\n")
    return row, corpora


def table(rows: Dict[str, Dict[str, dict]], chosen: Optional[str], confidence: Optional[float] = None) -> str:
    names = list(rows[REFERENCE])
    lines = ["| weights | " + " | ".join(f"`{n}` WER / PC-WER / PER" for n in names) + " | passes |",
             "|---|" + "---|" * len(names) + "---|"]
    ref = rows[REFERENCE]
    for name, r in rows.items():
        bad = set() if name == REFERENCE else set(worse(r, ref, confidence))
        cells = [" / ".join(fmt(r[n][k]) + ("+" if (n, k) in bad else "") for k, _, _ in FIGURES) for n in names]
        mark = "" if name == REFERENCE else (("yes" if passes(r, ref, confidence) else "no")
                                             + (", picked" if name == chosen else ""))
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {mark} |")
    return "\n".join(lines)


def main(argv=None) -> Dict[str, object]:
    args = get_parser().parse_args(argv)
    setup_logging()
    if len(args.exp_dir) != len(args.iter):
        raise SystemExit(f"give one --iter per --exp-dir: {len(args.exp_dir)} run(s), {len(args.iter)} --iter")
    if not 0 < args.confidence <= 1:
        raise SystemExit(f"--confidence {args.confidence}: give a share in (0, 1]")
    if args.resamples < 1:
        raise SystemExit(f"--resamples {args.resamples}: give at least 1")
    grid = parse_weights(args.weights, len(args.exp_dir))
    manifests = parse_sets(args.cuts)
    if not (args.model_dir / "tokens.txt").is_file():
        raise SystemExit(f"--model-dir {args.model_dir}: no tokens.txt (an export's directory is needed)")
    sets = {name: utterances.read_once(utterances.from_cuts(path, args.max_utts)) for name, path in manifests.items()}
    empty = [name for name, utts in sets.items() if not utts]
    if empty:
        raise SystemExit(f"--cuts: no utterance to decode in {', '.join(empty)}")
    logging.info("reference %s on %s", args.model_dir, ", ".join(f"{n} ({len(u)} utts)" for n, u in sets.items()))
    confidence = args.confidence if args.rule == "bootstrap" else None
    rows = {}
    rows[REFERENCE], ref_scores = measure(args, args.model_dir, sets, args.work_dir / REFERENCE,
                                          cache_key=decoding_key(args, args.model_dir, manifests))
    for i, weights in enumerate(grid, 1):
        name = tag(weights)
        logging.info("mix %d/%d: weights %s (the start %g)", i, len(grid), name, 1 - sum(weights))
        mix_dir = args.work_dir / f"mix-{name.replace('/', '-')}"
        rows[name], _ = measure(args, write_mix(args, weights, mix_dir), sets, mix_dir, against=ref_scores)
    chosen = pick(rows, confidence)
    rule = ("worse on no figure by a paired bootstrap of the utterances (worse in >= "
            f"{confidence:g} of {args.resamples} resamples: marked +) and a lower PC-WER sum"
            if confidence is not None else "worse on no figure (marked +)")
    print(f"Runs {' '.join(map(str, args.exp_dir))} (--iter {' '.join(map(str, args.iter))} --avg {args.avg}), "
          f"start {args.start}; reference {args.model_dir}; {args.decoding_method}; a mix passes when {rule}")
    print(table(rows, chosen, confidence))
    print(f"Pick: {chosen}" if chosen else "Pick: none (no mix passes: keep the reference)")
    result = {"rows": rows, "pick": chosen, "sets": {n: str(p) for n, p in manifests.items()},
              "rule": {"rule": args.rule, "confidence": confidence, "resamples": args.resamples, "seed": args.seed},
              "search": search_kwargs(args, args.model_dir), "command": sys.argv}
    if args.output_json:
        args.output_json.write_text(json.dumps(result, indent=1) + "\n")
    return result


if __name__ == "__main__":
    main()
