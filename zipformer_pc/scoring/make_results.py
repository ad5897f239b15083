"""Write a recipe's RESULTS.md (and its figures) from its decoding outputs.

Usage (stage 6 of egs/synth/run.sh and egs/librispeech/run.sh calls it; ``python -m zipformer_pc.results``,
``zpc-results`` and ``python scoring/make_results.py`` are the same command):
  python -m zipformer_pc.results --plan egs/systems.tsv --exp-dir egs/synth/exp --data-dir data/synth \
      --results-dir egs/synth --test-set "test=in-domain" --test-set "test_ood=out-of-domain" \
      --num-epochs 8 --avg 3 --command "bash run.sh"

Reads the experiment plan (``--plan``: which systems, in which tables, under
which label and RTF row), every system's
``greedy_search/recogs-*`` files written by ``zipformer_pc.decoding.decode``, the
streaming RTF table of ``scoring/measure_rtf.py`` (``EXP_DIR/rtf.json``), its
latency table (``EXP_DIR/latency.md``), the server load table of
``benchmarks/server_load.py`` (``EXP_DIR/load.md``) and the stage timings
(``EXP_DIR/timing.tsv``), and writes ``RESULTS_DIR/RESULTS.md`` and
``RESULTS_DIR/figures/*.png``:

* Table I: the paper's configurations on the first ``--test-set``, with the
  parameter count and the streaming RTF;
* Table II: the same systems on the other test sets;
* Table III: the conditioned model with punctuated proportions 1, 0.5, 0.35,
  0.2, 0.05, fixed subsets against the paper's random per-batch split;
* the alpha sweep; per-mark PER (LibriSpeech-PC layout) of the conditioned
  model; the ONNX streaming table;
* caption latency and stability per chunk size, and the server under load
  (each with the command that measured it, or how to measure it).

Every metric is recomputed here from the recognitions with
``zipformer_pc.metrics`` (WER from the N output, the others from the P
output), so the significance marks come from the same per-utterance errors:
``*`` marks a difference from the table's reference system that the
matched-pair test (MAPSSWE) finds significant at p < 0.05.  A system whose
outputs are missing gets a row of ``-`` and is listed as missing, so a
partial run still writes its tables.
"""

import argparse
import csv
import datetime
import json
import logging
import re
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from zipformer_pc.layout import (DEFAULT_CHUNK_SIZE, DEFAULT_LEFT_CONTEXT_FRAMES, checkpoint_tag, parse_result_name,
                                 result_glob, result_name, run_names, whisper_suffix)
from zipformer_pc.machine import describe_machine
from zipformer_pc.metrics import compare_systems, per_mark_table, score_corpus
from zipformer_pc.transcripts import TranscriptError, pair_transcripts, read_transcripts
from zipformer_pc.whisper import RUN_KEYS, rtf_note, setup_note

REFERENCE = "cond_p"  # the reference system of the significance marks
MAIN_COLUMNS = (("WER", "wer"), ("PuncER", "punc_er"), ("CaseER", "case_er"), ("PC-WER", "pc_wer"),
                ("PER", "per"), ("WER-C", "wer_c"), ("WER-PC", "wer_pc"))
SIG_KEYS = ("wer", "punc_er", "case_er", "pc_wer")


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--plan", type=Path, default=Path("egs/systems.tsv"), help="the experiment plan")
    p.add_argument("--test-set", dest="test_sets", action="append", default=[], metavar="NAME=DESCRIPTION",
                   help="a test set of the tables (repeat; the first is Table I's)")
    p.add_argument("--exp-dir", type=Path, required=True)
    p.add_argument("--data-dir", type=Path, required=True, help="the prepared dataset (for stats.md)")
    p.add_argument("--stats", type=Path, action="append", default=[], metavar="STATS_MD",
                   help="another dataset's stats.md (prepare.sh writes one per dataset, e.g. DATA/real/stats.md "
                        "for test_real): its manifests join the Data table (repeat)")
    p.add_argument("--results-dir", type=Path, required=True, help="RESULTS.md and figures/ go here")
    p.add_argument("--decoding-method", default="greedy_search")
    p.add_argument("--checkpoint", default=None,
                   help="the decoded weights, as in the recognition file names: iter-B-avg-A or epoch-E-avg-A "
                        "[epoch-NUM_EPOCHS-avg-AVG]")
    p.add_argument("--num-epochs", type=int, default=None, help="with --avg: --checkpoint epoch-E-avg-A")
    p.add_argument("--avg", type=int, default=None)
    p.add_argument("--training", default=None, help="how every system was trained, for the header "
                   "[trained from scratch for NUM_EPOCHS epochs of at most MAX_DURATION s batches]")
    p.add_argument("--encoder", default="tiny")
    p.add_argument("--max-duration", default="")
    p.add_argument("--size", default="default")
    p.add_argument("--corpus", default="the embedded synthetic corpus", help="what was trained on, for the title")
    p.add_argument("--seed", type=int, default=42, help="the first seed; seed S > SEED lives in EXP_DIR/NAME-seedS")
    p.add_argument("--num-seeds", type=int, default=1,
                   help="seeds of the Table III systems (cond_p among them): their rows show mean +- std over "
                        "seeds and their significance marks pool the seeds' utterances")
    p.add_argument("--train-hours", default="", help="training speech per epoch, for the budget note")
    p.add_argument("--command", default="bash run.sh", help="the command that produced the runs")
    p.add_argument("--level", type=float, default=0.05, help="significance level")
    return p


# ------------------------------------------------------------------ inputs


def read_plan(path: Path) -> List[Dict[str, str]]:
    """The rows of the experiment plan (egs/systems.tsv: tab-separated, ``#`` comments, ``-`` for none)."""
    if not path.is_file():
        raise SystemExit(f"{path} is missing: the experiment plan (egs/systems.tsv)")
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader((line for line in f if not line.startswith("#")), delimiter="\t"))
    for row in rows:
        row["tables"] = row["tables"].split(",")  # type: ignore[assignment]
    return rows


def stats_table(paths: List[Path]) -> str:
    """The Data table: the first stats.md as it is, the rows of the others' manifest tables after it
    (prepare.sh writes every stats.md with the same columns); a file that is not there is left out."""
    parts = [p.read_text().strip() for p in paths if p.is_file()]
    if not parts:
        return ""
    lines = parts[0].splitlines()
    head = next((i for i, line in enumerate(lines) if line.startswith("| manifest")), None)
    end = len(lines) if head is None else next(
        (i for i in range(head, len(lines)) if not lines[i].startswith("|")), len(lines))
    rows = [line for text in parts[1:] for line in text.splitlines()
            if line.startswith("|") and not line.startswith(("| manifest", "|---"))]
    return "\n".join(lines[:end] + rows + lines[end:])


def parse_test_sets(specs: List[str]) -> List[Tuple[str, str]]:
    out = []
    for spec in specs:
        name, _, desc = spec.partition("=")
        if not name:
            raise SystemExit(f"--test-set: expected NAME=DESCRIPTION, got {spec!r}")
        out.append((name, desc or name))
    if not out:
        raise SystemExit("give the test sets with --test-set NAME=DESCRIPTION (the first is Table I's)")
    return out


def proportion(row: Dict[str, str]) -> Tuple[str, str]:
    """(punctuated proportion, "fixed" subset or "random" per-batch split) of a plan row."""
    if row["punct_proportion"] != "-":
        return row["punct_proportion"], "random"
    return row["subset"].lstrip("p"), "fixed"


class Outputs:
    """The scored recognitions of one system on one test set (P and N modes).

    Over several runs (seeds), ``n`` and ``p`` pool the runs' utterances (ids
    prefixed by the run's index, so two systems with the same seeds pair up in
    the significance test) and ``runs`` holds each run's own scores."""

    def __init__(self, triples: Dict[str, Optional[List[Tuple[str, str, str]]]], source: str,
                 runs: Optional[List["Outputs"]] = None):
        self.triples = triples
        self.n = score_corpus(triples["N"]) if triples.get("N") else None
        self.p = score_corpus(triples["P"]) if triples.get("P") else None
        self.source = source
        self.runs = runs or [self]

    def summary(self) -> Dict[str, Optional[float]]:
        out: Dict[str, Optional[float]] = {k: None for _, k in MAIN_COLUMNS}
        if self.p is not None:
            out.update({k: v for k, v in self.p.summary().items() if k in out})  # type: ignore[misc]
        out["wer"] = self.n.summary()["wer"] if self.n is not None else None  # type: ignore[assignment]
        return out

    def mean_std(self, key: str) -> Optional[Tuple[float, float, int]]:
        """(mean, sample standard deviation, runs) of a metric over the runs."""
        vals = [v for v in (r.summary()[key] for r in self.runs) if v is not None]
        if not vals:
            return None
        mean = sum(vals) / len(vals)
        var = sum((v - mean) ** 2 for v in vals) / (len(vals) - 1) if len(vals) > 1 else 0.0
        return mean, var ** 0.5, len(vals)


def pooled(runs: List[Outputs]) -> Outputs:
    """One Outputs over several runs: utterance ids become ``sK/ID`` (K: the run's index)."""
    if len(runs) == 1:
        return runs[0]
    triples: Dict[str, Optional[List[Tuple[str, str, str]]]] = {}
    for mode in ("N", "P"):
        got = [r.triples.get(mode) for r in runs]
        triples[mode] = None if any(t is None for t in got) else [
            (f"s{k}/{u}", ref, hyp) for k, t in enumerate(got) for u, ref, hyp in t]  # type: ignore[union-attr]
    return Outputs(triples, "; ".join(r.source for r in runs), runs=runs)


def decoded_files(dec_dir: Path, kind: str, test: str, mode: str, checkpoint: Optional[str] = None,
                  cascade: Optional[bool] = None) -> List[Path]:
    """decode.py's ``KIND-TEST-MODE-SUFFIX`` files (zipformer_pc.layout) of the decoded weights
    ``checkpoint`` (any when None), cascade outputs or not (either when None)."""
    out = []
    for p in dec_dir.glob(result_glob(kind, test, mode)):
        r = parse_result_name(p.name)
        if r is None or r.decode is None or (r.test, r.mode) != (test, mode):
            continue
        if (checkpoint is None or r.decode.tag == checkpoint) and (cascade is None or r.decode.cascade == cascade):
            out.append(p)
    return out


def find_recogs(dec_dir: Path, test: str, mode: str, cascade: bool, checkpoint: Optional[str] = None) -> Optional[Path]:
    """The newest ``recogs-TEST-MODE-*`` file of the decoded weights ``checkpoint`` (any when None;
    cascade outputs end in ``-cascade``)."""
    cands = decoded_files(dec_dir, "recogs", test, mode, checkpoint, cascade)
    return max(cands, key=lambda p: p.stat().st_mtime) if cands else None


def load_outputs(exp_dir: Path, name: str, method: str, test: str, cascade: bool = False,
                 checkpoint: Optional[str] = None) -> Optional[Outputs]:
    dec_dir = exp_dir / name / method
    triples: Dict[str, Optional[List[Tuple[str, str, str]]]] = {"N": None, "P": None}
    sources = []
    for mode in ("N", "P"):
        path = find_recogs(dec_dir, test, mode, cascade, checkpoint)
        if path is None:
            continue
        try:
            refs = read_transcripts(str(path), "ref")
            hyps = read_transcripts(str(path), "hyp")
        except (TranscriptError, OSError) as e:
            logging.warning(f"{path}: {e}; skipped")
            continue
        triples[mode] = list(pair_transcripts(refs, hyps).triples)
        sources.append(path.name)
    if triples["N"] is None and triples["P"] is None:
        return None
    return Outputs(triples, ", ".join(sources))


def decoded_summary(exp_dir: Path, name: str, method: str, test: str, checkpoint: Optional[str]) -> Optional[dict]:
    """The newest ``wer-summary`` file of the decoded weights ``checkpoint`` (P first): what decoding
    averaged (``averaged``, e.g. batches 121..240) and how it searched (``blank_penalty``, ...)."""
    for mode in ("P", "N"):
        cands = decoded_files(exp_dir / name / method, "wer-summary", test, mode, checkpoint)
        for path in sorted(cands, key=lambda p: p.stat().st_mtime, reverse=True):
            try:
                summ = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            if isinstance(summ, dict):
                return summ
    return None


def identical_output_groups(exp_dir: Path, names: List[str], method: str, test: str,
                            checkpoint: Optional[str] = None) -> List[List[str]]:
    """Groups (of two or more) of systems whose N and P transcripts on ``test`` are identical."""
    by_output: Dict[Tuple[str, ...], List[str]] = {}
    for name in names:
        key: List[str] = []
        for mode in ("N", "P"):
            path = find_recogs(exp_dir / name / method, test, mode, cascade=False, checkpoint=checkpoint)
            if path is None:
                key.append("")
                continue
            try:
                hyps = read_transcripts(str(path), "hyp")
            except (TranscriptError, OSError):
                key.append(f"unreadable {path}")  # never grouped with another system
                continue
            key.append("\n".join(f"{u}\t{hyps[u]}" for u in sorted(hyps)))
        if any(key):
            by_output.setdefault(tuple(key), []).append(name)
    return [g for g in by_output.values() if len(g) > 1]


def parameter_count(exp_dir: Path, name: str) -> Optional[int]:
    logs = sorted((exp_dir / name / "log").glob("log-train-*"))
    for path in reversed(logs):
        m = re.search(r"Parameters: ([\d,]+) in total", path.read_text(encoding="utf-8", errors="replace"))
        if m:
            return int(m.group(1).replace(",", ""))
    return None


def read_timing(exp_dir: Path) -> Tuple[List[Tuple[str, int, str]], int]:
    """Per stage (in order): its seconds summed over every call of the recipe
    that ran it, and its description; and the number of calls.  A row is
    ``stage<TAB>seconds<TAB>description`` for a finished stage, with a 4th field
    ``interrupted`` for a call that died in it (booked by the next call), or
    ``running`` for a stage still in progress (this call's: not counted)."""
    path = exp_dir / "timing.tsv"
    if not path.is_file():
        return [], 0
    seconds: Dict[str, int] = {}
    desc: Dict[str, str] = {}
    calls: Dict[str, int] = {}
    for line in path.read_text().splitlines():
        parts = line.split("\t")
        if len(parts) < 3 or not parts[1].isdigit() or (len(parts) > 3 and parts[3] == "running"):
            continue
        st = parts[0]
        seconds[st] = seconds.get(st, 0) + int(parts[1])
        if len(parts) == 3 or st not in desc:  # a finished row's description wins
            desc[st] = parts[2]
        calls[st] = calls.get(st, 0) + 1
    order = sorted(seconds, key=lambda k: (not k.isdigit(), int(k) if k.isdigit() else 0, k))
    return [(st, seconds[st], desc[st]) for st in order], max(calls.values(), default=0)


def measurement(exp_dir: Path, stem: str) -> Tuple[Optional[str], Dict[str, Any]]:
    """``EXP_DIR/STEM.md`` (None when absent) and the fields of ``EXP_DIR/STEM.json`` ({} when absent)."""
    md, js = exp_dir / f"{stem}.md", exp_dir / f"{stem}.json"
    return (md.read_text().strip() if md.is_file() else None), (json.loads(js.read_text()) if js.is_file() else {})


def restoration_scores(data_dir: Path, test: str) -> List[Tuple[str, Dict[str, float]]]:
    """The text restoration models of the prepared dataset (``DATA_DIR/restore/SUBSET/results.json``,
    written by ``zipformer_pc.restoration.train``) scored on the reference words of ``test``:
    [(subset, {"punc_er", "case_er", "per"})], for the subsets that scored it."""
    found = []
    for path in sorted(data_dir.glob("restore/*/results.json")):
        try:
            res = (json.loads(path.read_text()).get("results") or {}).get(test)
        except (OSError, ValueError):
            logging.warning(f"{path}: unreadable, left out")
            continue
        if res and all(res.get(k) is not None for k in ("punc_er", "case_er", "per")):
            found.append((path.parent.name, {k: float(res[k]) for k in ("punc_er", "case_er", "per")}))
    return found


def code_version() -> str:
    """``commit abc1234`` of the checkout that made the results (``+ local changes`` if code differs)."""
    import subprocess

    root = Path(__file__).resolve().parents[2]  # the checkout: zipformer_pc/scoring/make_results.py
    try:
        commit = subprocess.run(["git", "rev-parse", "--short=10", "HEAD"], cwd=root, capture_output=True,
                                text=True, check=True).stdout.strip()
        # the run itself rewrites egs/*/RESULTS.md and its figures: those do not count as changes
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ".",
                                ":(exclude)egs/*/RESULTS.md", ":(exclude)egs/*/figures"],
                               cwd=root, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "code version unknown (not a git checkout)"
    return f"commit `{commit}`" + (" + local changes" if dirty else "")


# ------------------------------------------------------------------ tables


def onnx_agreement(rtf_rows: List[Dict[str, object]], plan: List[Dict[str, str]], exp_dir: Path, method: str,
                   test: str, checkpoint: Optional[str]) -> List[str]:
    """A table comparing the ONNX runtime's transcripts (``hyps`` of measure_rtf's rows, 1 thread) with
    the PyTorch decoding's recognitions of the same system on the same utterances."""
    by_rtf = {s["rtf"]: s for s in plan if s["rtf"] != "-"}
    out = ["| system | precision | utterances | identical N | identical P | WER ONNX / PyTorch | "
           "PC-WER ONNX / PyTorch |", "|---|---|---|---|---|---|---|"]
    for r in rtf_rows:
        sysrow = by_rtf.get(str(r.get("system")))
        hyps = r.get("hyps")
        if sysrow is None or not isinstance(hyps, dict) or int(r.get("num_threads", 0)) != 1:
            continue
        cascade = sysrow["model_type"] == "norm"
        cells = []
        scores: Dict[str, Tuple[Optional[float], Optional[float]]] = {}
        for mode, key in (("N", "wer"), ("P", "pc_wer")):
            path = find_recogs(exp_dir / sysrow["name"] / method, test, mode, cascade and mode == "P", checkpoint)
            pairs = [(u, h[mode]) for u, h in hyps.items() if isinstance(h, dict) and mode in h]
            if path is None or not pairs:
                cells.append("-")
                scores[mode] = (None, None)
                continue
            ref = read_transcripts(str(path), "ref")
            torch_hyp = read_transcripts(str(path), "hyp")
            common = [(u, h) for u, h in pairs if u in torch_hyp]
            same = sum(" ".join(h.split()) == " ".join(torch_hyp[u].split()) for u, h in common)
            cells.append(f"{same} / {len(common)}")
            onnx = score_corpus([(u, ref[u], h) for u, h in common]).summary()[key] if common else None
            pt = score_corpus([(u, ref[u], torch_hyp[u]) for u, _ in common]).summary()[key] if common else None
            scores[mode] = (onnx, pt)  # type: ignore[assignment]
        n_utts = sum(isinstance(h, dict) for h in hyps.values())
        out.append("| " + " | ".join([str(r["system"]), str(r.get("precision", "")), str(n_utts)] + cells + [
            f"{fmt(scores['N'][0])} / {fmt(scores['N'][1])}", f"{fmt(scores['P'][0])} / {fmt(scores['P'][1])}"]) + " |")
    return out if len(out) > 2 else []


def fmt(x: Optional[float]) -> str:
    return "-" if x is None else f"{x:.2f}"


def sig_marks(a: Optional[Outputs], ref: Optional[Outputs], level: float) -> Dict[str, str]:
    """``*`` per metric where system A differs significantly from the reference."""
    marks: Dict[str, str] = {}
    if a is None or ref is None or a is ref:
        return marks
    if len(a.runs) != len(ref.runs):
        # a single-seed system against a reference with several seeds: the runs of the first seed
        a, ref = a.runs[0], ref.runs[0]
    for key, sa, sr in (("wer", a.n, ref.n), ("p", a.p, ref.p)):
        if sa is None or sr is None:
            continue
        try:
            res = compare_systems(sa, sr, level)
        except ValueError:
            continue
        for metric in (("wer",) if key == "wer" else ("punc_er", "case_er", "pc_wer")):
            if res[metric]["significant"]:
                marks[metric] = "*"
    return marks


def whisper_summary(exp_dir: Path, test: str) -> Optional[Dict[str, object]]:
    """Whisper base's figures on ``test`` (scoring/whisper_score.py's summaries in EXP_DIR/whisper_base:
    WER from its N output, the rest from its P output), or None when it was not run."""
    files = {m: exp_dir / "whisper_base" / result_name("wer-summary", test, m, whisper_suffix("base"))
             for m in ("N", "P")}
    if not files["N"].exists():
        return None
    n = json.loads(files["N"].read_text())
    out: Dict[str, object] = dict(json.loads(files["P"].read_text())) if files["P"].exists() else {}
    out["wer"], out["rtf"] = n.get("wer"), n.get("rtf")
    out["rtf_machine"], out["text_from"] = n.get("rtf_machine"), n.get("text_from")
    out.update({k: n.get(k) for k in RUN_KEYS})
    return out


def metrics_row(label: str, out: Optional[Outputs], extra: List[str], marks: Dict[str, str]) -> str:
    """A table row; over several runs each cell is ``mean ± std`` of the runs' figures."""
    if out is None:
        cells = ["-"] * len(MAIN_COLUMNS)
    elif len(out.runs) > 1:
        cells = []
        for _, k in MAIN_COLUMNS:
            ms = out.mean_std(k)
            cells.append("-" if ms is None else f"{ms[0]:.2f} ± {ms[1]:.2f}" + marks.get(k, ""))
    else:
        s = out.summary()
        cells = [fmt(s[k]) + marks.get(k, "") for _, k in MAIN_COLUMNS]
    return "| " + " | ".join([label] + extra + cells) + " |"


def table(header_extra: List[str], rows: List[str]) -> List[str]:
    names = ["system"] + header_extra + [n for n, _ in MAIN_COLUMNS]
    return ["| " + " | ".join(names) + " |", "|" + "---|" * len(names)] + rows


def main(argv=None) -> None:
    from zipformer_pc.logs import setup_logging

    setup_logging()
    args = get_parser().parse_args(argv)
    systems = {s["name"]: s for s in read_plan(args.plan)}
    test_sets = parse_test_sets(args.test_sets)
    in_table = {t: [s for s in systems.values() if t in s["tables"]] for t in ("I", "III", "alpha")}
    method = args.decoding_method
    missing: List[str] = []

    checkpoint = args.checkpoint
    if checkpoint is None and args.num_epochs is not None and args.avg is not None:
        checkpoint = checkpoint_tag(epoch=args.num_epochs, avg=args.avg)

    def runs_of(name: str) -> List[str]:
        """The runs of a system: one per seed for the Table III systems."""
        k = args.num_seeds if "III" in systems[name]["tables"] else 1
        return run_names(name, args.seed, k)

    def get(name: str, test: str, cascade: bool = False) -> Optional[Outputs]:
        outs = []
        for run in runs_of(name):
            out = load_outputs(args.exp_dir, run, method, test, cascade, checkpoint)
            if out is None:
                missing.append(f"{run}{' (cascade)' if cascade else ''} on {test}")
            else:
                outs.append(out)
        return pooled(outs) if outs else None

    rtf: Dict[str, float] = {}
    rtf_md, rtf_info = measurement(args.exp_dir, "rtf")
    rtf_rows: List[Dict[str, object]] = rtf_info.get("rows", [])
    for r in rtf_rows:
        if int(r.get("num_threads", 0)) == 1 and not r.get("int8"):
            rtf[str(r["system"])] = float(r["rtf"])

    lines: List[str] = []
    w = lines.append
    timing, calls = read_timing(args.exp_dir)
    total = sum(t for _, t, _ in timing)
    w(f"# Results: {args.corpus}" if args.size != "tiny" else "# Results: quick run (tiny corpus)")
    w("")
    w(f"Produced by `{args.command}` on {datetime.date.today().isoformat()} ({code_version()}), "
      f"on {describe_machine()}.")
    if timing:  # EXP_DIR/timing.tsv (a recipe that records no stage times gets no wall-time line)
        w(f"Wall time of the run: {total / 60:.1f} min"
          + (f", summed over {calls} calls of the recipe on this experiment directory (a resumed run, "
             "or stages run again)" if calls > 1 else "") + " ("
          + ", ".join(f"stage {s} {desc}: {t / 60:.1f} min" for s, t, desc in timing) + ").")
    w("")
    training = args.training or (f"trained from scratch for {args.num_epochs} epoch(s) of at most "
                                 f"{args.max_duration} s batches")
    summ = decoded_summary(args.exp_dir, REFERENCE, method, test_sets[0][0], checkpoint) or {}
    averaged = summ.get("averaged")
    bp = summ.get("blank_penalty")  # summaries written before decode.py recorded it have none
    penalty = "" if bp is None else (", no blank penalty" if float(bp) == 0 else f", blank penalty {float(bp):g}")
    seeds = (f"seeds {args.seed}..{args.seed + args.num_seeds - 1} for the Table III systems (cond_p among them), "
             f"{args.seed} for the others" if args.num_seeds > 1 else f"seed {args.seed}")
    w(f"Every model: streaming Zipformer transducer, encoder `{args.encoder}`, {training}, {seeds}; decoded "
      f"with the weights `{checkpoint or 'newest'}`"
      + (f" ({REFERENCE}: {averaged})" if averaged else "") + f", {method.replace('_', ' ')}{penalty}, simulated streaming "
      f"(chunk {DEFAULT_CHUNK_SIZE} frames, left context {DEFAULT_LEFT_CONTEXT_FRAMES} frames: what the exported "
      "streaming model computes). WER comes from "
      "the N output, PuncER / CaseER / PC-WER / PER / WER-C / WER-PC from the P output (metrics: "
      "`zipformer_pc.metrics`, as defined in docs/metrics.md). `*`: significantly different from the table's "
      f"reference system (MAPSSWE matched-pair test, p < {args.level}). The training commands are in "
      "`EXP_DIR/SYSTEM/train_cmd.txt`.")
    w("")

    # ---------------------------------------------------------- budget note
    wers = []
    for name in (s["name"] for s in in_table["I"] if s["rtf"] != "-"):
        out = load_outputs(args.exp_dir, name, method, test_sets[0][0], checkpoint=checkpoint)
        if out is not None and out.summary()["wer"] is not None:
            wers.append(out.summary()["wer"])
    hours = (f"{float(args.train_hours) * args.num_epochs:.2f} h of speech"
             if args.train_hours and args.num_epochs else None)
    if wers and min(wers) > 80.0:
        w(f"**Read this first.** Each model saw {hours or 'little speech'} in training; at this budget none has yet "
          f"learned to transcribe (the best Table I WER is {min(wers):.1f}%). The tables show that every stage of the "
          "recipe runs and how each configuration is scored, not how the methods compare: for that, train longer "
          "(more training: the recipe's budget options, more speech; see the README).")
        w("")
    elif hours:
        w(f"Each model saw {hours} in training.")
        w("")
    same = identical_output_groups(args.exp_dir, [r for n in systems for r in runs_of(n)], method,
                                   test_sets[0][0], checkpoint)
    if same:
        w(f"Systems whose transcripts on `{test_sets[0][0]}` are identical, in both modes, hence equal rows: "
          + "; ".join(" = ".join(g) for g in same) + ". They were trained separately (their weights differ); "
          "at this budget they still emit the same strings.")
        w("")

    # ---------------------------------------------------------- Tables I, II
    for ti, (test, test_desc) in enumerate(test_sets):
        # recordings of people beside the synthetic Table II (prepare.sh --dataset real)
        title = "Table I" if ti == 0 else "Real speech" if test == "test_real" else "Table II"
        w(f"## {title}: `{test}` ({test_desc})")
        w("")
        w("Reference system for the significance marks: conditioned, P+N.")
        w("")
        ref = get(REFERENCE, test)
        rows = []
        for s in in_table["I"]:
            name, cascade = s["name"], s["model_type"] == "norm"
            out = ref if name == REFERENCE else get(name, test, cascade)
            params = parameter_count(args.exp_dir, name)
            extra = [s["refs"] + (" (+ text)" if cascade else ""), f"{params / 1e6:.2f}M" if params else "-"]
            if ti == 0:
                r = rtf.get(s["rtf"], None)
                extra.append(fmt(r) if r is not None else "-")
            rows.append(metrics_row(s["label"], out, extra, sig_marks(out, ref, args.level)))
        whisper = whisper_summary(args.exp_dir, test)
        if whisper is not None:  # the comparison system: scripts/whisper_score.py into EXP_DIR/whisper_base
            extra = ["680k h of real speech (P)", "74M"] + ([fmt(whisper.get("rtf"))] if ti == 0 else [])
            rows.append("| " + " | ".join(["Whisper base (not streaming)"] + extra
                                          + [fmt(whisper.get(k)) for _, k in MAIN_COLUMNS]) + " |")
        head = ["training data", "params"] + (["RTF (ONNX, 1 thread)"] if ti == 0 else [])
        lines.extend(table(head, rows))
        w("")
        if whisper is not None:
            w(f"Whisper base: {setup_note([whisper])}, its text through our normalization and "
              "metrics (`scoring/whisper_score.py`). " + rtf_note([whisper]))
            w("")
        for subset, r in restoration_scores(args.data_dir, test):
            w(f"The text restoration model (`restore/{subset}`: the cascade's second stage, and the writer of the "
              f"P' references) on the reference words of `{test}`, no ASR: PuncER {fmt(r['punc_er'])}, "
              f"CaseER {fmt(r['case_er'])}, PER {fmt(r['per'])}. The P' systems learn punctuation of about that "
              "quality; the cascade adds its ASR errors.")
            w("")

    # ------------------------------------------------------- Table III
    w("## Table III: proportion of punctuated training data (conditioned, alpha 0.5)")
    w("")
    w("`fixed`: the P references of a fixed subset of the cuts (prepare.sh's nested `_pF` manifests); "
      "`random`: the paper's per-batch random split (`--punct-proportion F`). `*` on a `random` row: "
      "significantly different from the `fixed` row of the same proportion; on a `fixed` row: from proportion 1.")
    w("")
    prop_scores: Dict[Tuple[str, str, str], Optional[Outputs]] = {}
    # fixed before random at each proportion, largest proportion first
    table3 = sorted(in_table["III"], key=lambda s: (-float(proportion(s)[0]), proportion(s)[1]))
    for test, _ in test_sets:
        w(f"### `{test}`")
        w("")
        rows = []
        full = get(REFERENCE, test)
        for s in table3:
            name = s["name"]
            f, kind = proportion(s)
            out = full if name == REFERENCE else get(name, test)
            prop_scores[(test, f, kind)] = out
            ref = full if kind == "fixed" else prop_scores.get((test, f, "fixed"))
            rows.append(metrics_row(name, out, [f, kind], sig_marks(out, ref, args.level)))
        lines.extend(table(["proportion", "split"], rows))
        w("")

    # the paper's question: what does little punctuated data cost?  Its Table III goes from
    # PC-WER 9.32 at proportion 0.5 to 11.46 at 0.05 (+2.14; the abstract says +2.42)
    test0 = test_sets[0][0]
    base_f = "0.5" if prop_scores.get((test0, "0.5", "fixed")) is not None else "1"
    base, low = prop_scores.get((test0, base_f, "fixed")), prop_scores.get((test0, "0.05", "fixed"))
    if base is not None and low is not None and base.p is not None and low.p is not None:
        a, b = base.mean_std("pc_wer"), low.mean_std("pc_wer")
        if a is not None and b is not None:
            d = b[0] - a[0]
            try:
                sig: Optional[bool] = bool(compare_systems(low.p, base.p, args.level)["pc_wer"]["significant"])
            except ValueError:
                sig = None
            verdict = "larger than" if d > 2.14 * 1.5 else "smaller than" if d < 2.14 / 1.5 else "close to"
            w(f"**What little punctuated data costs** (`{test0}`, fixed subsets): P references for 5% of the cuts "
              f"instead of {float(base_f):.0%} change PC-WER by {d:+.2f} points ({a[0]:.2f} → {b[0]:.2f}"
              + (f", means over {min(a[2], b[2])} seeds" if min(a[2], b[2]) > 1 else "") + "; "
              + ("significant" if sig else "not significant" if sig is False else "significance not computed")
              + f" at p < {args.level}). The paper's Table III goes from 9.32 at 0.5 to 11.46 at 0.05 on "
              f"LibriSpeech test-clean (+2.14; its abstract quotes +2.42): our increase is {verdict} that.")
            w("")

    # ------------------------------------------------------- alpha sweep
    w("## Alpha: `(1 - alpha) L_N + alpha L_P` (conditioned, P+N)")
    w("")
    w("`*`: significantly different from alpha 0.5.")
    w("")
    for test, _ in test_sets:
        w(f"### `{test}`")
        w("")
        rows = []
        ref = get(REFERENCE, test)
        for s in sorted(in_table["alpha"], key=lambda s: float(s["alpha"])):
            name = s["name"]
            out = ref if name == REFERENCE else get(name, test)
            rows.append(metrics_row(name, out, [s["alpha"]], sig_marks(out, ref, args.level)))
        lines.extend(table(["alpha"], rows))
        w("")

    # ------------------------------------------------------- per mark
    w("## Punctuation per mark (LibriSpeech-PC layout), conditioned P+N")
    w("")
    for test, _ in test_sets:
        out = get(REFERENCE, test)
        if out is not None and out.p is not None:
            w(f"### `{test}`")
            w("")
            w(per_mark_table(out.p.summary()))
            w("")

    # ------------------------------------------------------- ONNX
    w("## Streaming with the exported ONNX models (`scoring/measure_rtf.py`)")
    w("")
    if rtf_md is not None:
        w("Feature extraction + encoder + greedy search (+ restoration for the cascade) over audio duration, "
          "audio fed in pieces as a live stream; accuracy of the ONNX runtime's own transcripts.")
        w("")
        w(rtf_md)
        agreement = onnx_agreement(rtf_rows, list(systems.values()), args.exp_dir, method, test_sets[0][0],
                                   checkpoint)
        if agreement:
            w("")
            w(f"ONNX streaming against the PyTorch decoding of the same weights (`{test_sets[0][0]}`, the "
              "utterances of the RTF measurement, 1 thread): utterances whose transcript is identical, and the "
              "error rates of both on these utterances. The two differ by design in three places: the ONNX "
              "runtime computes its own fbank (kaldi-native-fbank, as sherpa-onnx) where decoding reads lhotse's, "
              "it runs the encoder chunk by chunk with its caches where decoding masks a whole-utterance forward "
              "(simulated streaming), and int8 quantizes the weights. So a few words may differ; a large gap "
              "would be a bug.")
            w("")
            lines.extend(agreement)
    else:
        w("Not measured in this run (stage 5 did not run).")
    w("")

    # ------------------------------------------------------- latency, load
    w("## Caption latency and stability per chunk size")
    w("")
    md_text, info = measurement(args.exp_dir, "latency")
    if md_text is not None:
        utts = (f" on {info['num_utts']} utterances ({info['audio_seconds'] / 60:.1f} min of audio) fed in "
                f"{info['piece_seconds']} s pieces" if "num_utts" in info else "")
        w(f"Measured by `{info.get('command', 'scoring/measure_rtf.py --latency true')}`{utts}: one export per "
          "chunk size, fp32, 1 thread. The first table is their RTF and accuracy; the second says, per mode, how "
          "late a word is shown for good after its end in the final transcript (mean / p50 / p90; `+ compute`: "
          "p90 with the decoding time of the call that showed it), how late a punctuation mark comes after its "
          "word, and how often a shown word grows (extensions) or changes (revisions; greedy search never "
          "revises) per final word (`zipformer_pc/runtime/latency.py` defines them).")
        w("")
        w(md_text)
    else:
        w("Not measured in this run. Stage 5 of `egs/synth/run.sh` measures it (`--latency-chunks`, "
          "`--latency-utts`), as does `python scoring/measure_rtf.py --system chunk-32=MODEL_DIR "
          "--system chunk-16=MODEL_DIR_16 ... --cuts CUTS --latency true --output-md EXP_DIR/latency.md "
          "--output-json EXP_DIR/latency.json` with one export per chunk size (`python -m zipformer_pc.export "
          "--chunk-size C --output-dir ...`).")
    w("")
    w("## Server load")
    w("")
    md_text, info = measurement(args.exp_dir, "load")
    if md_text is not None:
        w(f"Measured by `{info.get('command', 'benchmarks/server_load.py')}`: for each number of streams, that "
          "many clients stream their own audio at once to a WebSocket server started for the benchmark.")
        w("")
        w(md_text)
    else:
        w("Not measured in this run. Stage 5 of `egs/synth/run.sh` measures it (`--load-streams`), as does "
          "`python benchmarks/server_load.py --model-dir MODEL_DIR --streams 1,4,8,16,32 "
          "--output-md EXP_DIR/load.md --output-json EXP_DIR/load.json`.")
    w("")

    # ------------------------------------------------------- figures
    proportions = sorted({proportion(s)[0] for s in table3}, key=float, reverse=True)
    figs = make_figures(args.results_dir, prop_scores, proportions, [t for t, _ in test_sets],
                        get(REFERENCE, test_sets[0][0]))
    if figs:
        w("## Figures")
        w("")
        for title, rel in figs:
            w(f"![{title}]({rel})")
            w("")

    # ------------------------------------------------------- data, honesty
    data_table = stats_table([args.data_dir / "stats.md"] + list(args.stats))
    if data_table:
        w("## Data")
        w("")
        w(data_table)
        w("")
    if missing:
        w("## Missing outputs")
        w("")
        w("These were not found (not trained or not decoded in this run); their cells show `-`:")
        w("")
        for m in sorted(set(missing)):
            w(f"- {m}")
        w("")
    args.results_dir.mkdir(parents=True, exist_ok=True)
    out_path = args.results_dir / "RESULTS.md"
    tmp = out_path.with_suffix(".md.tmp")
    tmp.write_text("\n".join(lines) + "\n", encoding="utf-8")
    tmp.replace(out_path)
    logging.info(f"Wrote {out_path}" + (f" ({len(set(missing))} outputs missing)" if missing else ""))


def make_figures(results_dir: Path, prop_scores, proportions: List[str], tests: List[str],
                 cond: Optional[Outputs]) -> List[Tuple[str, str]]:
    """PC-WER / PuncER / CaseER against the punctuated proportion, and the
    punctuation substitution matrix of the conditioned model."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        logging.warning("matplotlib is not installed: no figures")
        return []
    fig_dir = results_dir / "figures"
    fig_dir.mkdir(parents=True, exist_ok=True)
    made: List[Tuple[str, str]] = []

    fig, axes = plt.subplots(1, 3, figsize=(12, 3.6))
    plotted = False
    for ax, (label, key) in zip(axes, (("PC-WER", "pc_wer"), ("PuncER", "punc_er"), ("CaseER", "case_er"))):
        for test in tests:
            for kind, style in (("fixed", "-o"), ("random", "--s")):
                xs, ys, errs = [], [], []
                for f in proportions:
                    out = prop_scores.get((test, f, "fixed" if f == "1" else kind))
                    ms = out.mean_std(key) if out is not None else None
                    if ms is not None:
                        xs.append(float(f))
                        ys.append(ms[0])
                        errs.append(ms[1])
                if xs:
                    # error bars: the standard deviation over seeds (none with one seed)
                    ax.errorbar(xs, ys, yerr=errs if any(errs) else None, fmt=style, capsize=3,
                                label=f"{test}, {kind}")
                    plotted = True
        ax.set_xscale("log")
        ax.set_xticks([float(f) for f in proportions])
        ax.set_xticklabels(proportions)
        ax.set_xlabel("punctuated proportion")
        ax.set_ylabel(f"{label} (%)")
        ax.grid(alpha=0.3)
    if plotted:
        axes[0].legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(fig_dir / "proportion.png", dpi=110)
        made.append(("PC-WER, PuncER and CaseER against the punctuated proportion", "figures/proportion.png"))
    plt.close(fig)

    if cond is not None and cond.p is not None:
        matrix = cond.p.summary()["punct_matrix"]
        labels = list(matrix)  # type: ignore[arg-type]
        grid = [[matrix[r].get(h, 0) for h in labels] for r in labels]  # type: ignore[index]
        fig, ax = plt.subplots(figsize=(4.2, 3.6))
        ax.imshow(grid, cmap="Blues")
        names = ["none" if x == "_" else x for x in labels]
        ax.set_xticks(range(len(labels)), names)
        ax.set_yticks(range(len(labels)), names)
        ax.set_xlabel("hypothesis")
        ax.set_ylabel("reference")
        ax.set_title(f"conditioned P+N, {tests[0]}: punctuation")
        for i, row in enumerate(grid):
            for j, v in enumerate(row):
                ax.text(j, i, str(v), ha="center", va="center", fontsize=8)
        fig.tight_layout()
        fig.savefig(fig_dir / "punct_matrix.png", dpi=110)
        plt.close(fig)
        made.append((f"Punctuation substitution matrix (conditioned P+N, {tests[0]})", "figures/punct_matrix.png"))
    return made


if __name__ == "__main__":
    main()
