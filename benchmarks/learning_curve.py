#!/usr/bin/env python3
"""Learning curve: dev WER, PC-WER and PER against minutes of training on this machine.

Usage:
  # train for 60 minutes (checkpoint every 5), then score every checkpoint on dev
  python benchmarks/learning_curve.py run --data-dir data/synth --exp-dir exp/lc/base --minutes 60 \\
      --eval-every 5 --num-threads 2 -- --ctc-loss-scale 0.3
  # score again / only score (an interrupted run resumes its training first)
  python benchmarks/learning_curve.py run --data-dir data/synth --exp-dir exp/lc/base --minutes 60 --skip-train true
  # the same checkpoints decoded with the mean of the last 15 minutes' weights
  python benchmarks/learning_curve.py run --data-dir data/synth --exp-dir exp/lc/base --skip-train true --avg 3
  # ablation table and one plot over several runs
  python benchmarks/learning_curve.py compare --runs base=exp/lc/base,init=exp/lc/init --out exp/lc/compare

``run`` trains one system with ``zipformer_pc.training.train`` (default: the tiny
streaming ``conditioned`` model on ``train_p1``; anything after ``--`` is
passed to train.py and overrides the defaults) for ``--minutes`` of training
time (validation excluded), writing ``checkpoint-B.pt`` every
``--eval-every`` minutes.  Then it decodes the dev set with the weights
decoding would use for ``--iter B --avg 1`` (the exact mean of the weights
over the batches since the previous checkpoint; from the start of training
for the first; ``--avg A``: since the checkpoint A before, as
``decode.py --iter B --avg A`` and the recipes' ``--avg 3``), greedy search,
simulated streaming (chunk 32, left context 128 by default), both output modes, and scores them with
``zipformer_pc.metrics``: WER (N output), PC-WER, PER, PuncER, CaseER (P
output); the same on ``test_real``, recordings of people, when ``prepare.sh
--dataset real`` made it (``--real-cuts``; dashed in the plot).  Scores are cached per checkpoint (``curve.json``), so scoring again
is quick.  Writes ``learning_curve.csv`` and ``learning_curve.png`` in the
experiment directory and prints a table with the minutes to reach dev WER
80% (the end of the initial plateau), 50%, 20% and 10%.

The time axis is the training wall time the trainer records in each
checkpoint (``train_seconds``), so scoring, which runs afterwards, does not
slow the curve down; other load on the machine does (the table reports the
audio throughput, so runs can be compared by hours of audio seen too).

``compare`` reads finished runs and prints the ablation table (run, minutes
to WER 20% / 10%, best WER, PC-WER and PER, throughput) and draws one
figure.  Asserts nothing.
"""

import argparse
import csv
import json
import logging
import math
import subprocess
import re
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional

from zipformer_pc.logs import setup_logging
from zipformer_pc.layout import DEFAULT_CHUNK_SIZE, DEFAULT_LEFT_CONTEXT_FRAMES
from zipformer_pc.options import str2bool

ROOT = Path(__file__).resolve().parents[1]
THRESHOLDS = (80.0, 50.0, 20.0, 10.0)  # dev WER levels whose first time the table reports
FIELDS = ("batch", "minutes", "audio_hours", "wer", "pc_wer", "per", "punc_er", "case_er", "wer_c",
          "valid_loss_n", "valid_loss_p", "real_wer", "real_pc_wer", "real_per")
# recordings of people (prepare.sh --dataset real): scored beside dev when there
REAL_PREFIX = "real_"


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="train one system for a time budget, then score its checkpoints")
    r.add_argument("--data-dir", type=Path, required=True, help="DATA_DIR/synth of prepare.sh (fbank/, lang_bpe_*/)")
    r.add_argument("--exp-dir", type=Path, required=True)
    r.add_argument("--subset", default="p1", help="Training manifest synth_cuts_train_SUBSET.jsonl.gz")
    r.add_argument("--dev", default="dev", help="Scored split: synth_cuts_DEV.jsonl.gz")
    r.add_argument("--minutes", type=float, default=60.0, help="Training time budget")
    r.add_argument("--eval-every", type=float, default=5.0, help="Minutes of training between scored checkpoints")
    r.add_argument("--num-threads", type=int, default=2, help="Threads for training and for scoring")
    r.add_argument("--chunk-size", type=int, default=DEFAULT_CHUNK_SIZE)
    r.add_argument("--left-context-frames", type=int, default=DEFAULT_LEFT_CONTEXT_FRAMES)
    r.add_argument("--skip-train", type=str2bool, default=False, help="Only score the checkpoints there are")
    r.add_argument("--avg", type=int, default=1,
                   help="Score each checkpoint with the mean of the weights since the checkpoint AVG before it "
                        "(what decode.py --iter B --avg AVG loads; from the start of training while there are "
                        "fewer); AVG > 1 writes learning_curve_avgAVG.csv/.png")
    r.add_argument("--real-cuts", default="auto",
                   help="test_real's cuts (prepare.sh --dataset real), scored at every checkpoint beside dev: "
                        "auto: DATA_DIR/../real/fbank/real_cuts_test_real.jsonl.gz when it exists; none: not scored")
    r.add_argument("--seed", type=int, default=42)
    r.add_argument("train_args", nargs=argparse.REMAINDER, help="-- then extra train.py options")
    c = sub.add_parser("compare", help="ablation table and figure over finished runs")
    c.add_argument("--runs", required=True, help="name=exp_dir[,name=exp_dir...] (the first is the reference)")
    c.add_argument("--out", type=Path, required=True, help="Output stem: OUT.csv, OUT.png, OUT.md")
    c.add_argument("--avg", type=int, default=1, help="Read the runs' curves scored with run --avg AVG")
    return p


# ------------------------------------------------------------------ training


def bpe_model(data_dir: Path) -> Path:
    found = sorted(data_dir.glob("lang_bpe_*/bpe.model"))
    if not found:
        raise SystemExit(f"No lang_bpe_*/bpe.model under {data_dir}: run prepare.sh first")
    return found[0]


def checkpoints(exp_dir: Path) -> List[Path]:
    return sorted(exp_dir.glob("checkpoint-*.pt"), key=lambda p: int(p.stem.split("-")[1]))


def train(args) -> None:
    from zipformer_pc.model.loading import load_checkpoint

    extra = [a for a in args.train_args if a != "--"]
    have = checkpoints(args.exp_dir)
    cmd = [sys.executable, "-m", "zipformer_pc.training.train",
           "--exp-dir", str(args.exp_dir),
           "--train-cuts", str(args.data_dir / "fbank" / f"synth_cuts_train_{args.subset}.jsonl.gz"),
           "--valid-cuts", str(args.data_dir / "fbank" / f"synth_cuts_{args.dev}.jsonl.gz"),
           "--bpe-model", str(bpe_model(args.data_dir)),
           "--model-type", "conditioned", "--encoder", "tiny",
           "--num-epochs", "1000", "--save-every-n", "1000000000", "--keep-last-k", "0",
           "--valid-interval", "1000000000", "--tensorboard", "false",
           "--save-every-minutes", str(args.eval_every), "--max-minutes", str(args.minutes),
           "--num-threads", str(args.num_threads), "--seed", str(args.seed)]
    if have:
        last = load_checkpoint(have[-1])
        done_min = float(last.get("train_seconds", 0.0)) / 60
        if done_min >= args.minutes - 1e-6:
            logging.info(f"{args.exp_dir}: already trained {done_min:.1f} min, scoring only")
            return
        logging.info(f"{args.exp_dir}: resuming from {have[-1].name} ({done_min:.1f} min trained)")
        cmd += ["--start-batch", have[-1].stem.split("-")[1]]
    cmd += extra  # last: overrides the defaults above
    logging.info("Training: " + " ".join(cmd))
    r = subprocess.run(cmd, cwd=ROOT)
    if r.returncode != 0:
        raise SystemExit(f"train.py failed (exit {r.returncode}); see {args.exp_dir}/log")


# ------------------------------------------------------------------ scoring


def score_checkpoints(args) -> List[Dict[str, float]]:
    import torch

    from zipformer_pc.model.loading import average_between, load_checkpoint
    from zipformer_pc.data.tokenizer import Tokenizer
    from zipformer_pc.decoding.decode import decode_set
    from zipformer_pc.decoding.decode import get_parser as decode_parser
    from zipformer_pc.metrics import score_corpus
    from zipformer_pc.model.transducer import build_model
    from zipformer_pc.modes import MODE_N, MODE_P, output_modes

    torch.set_num_threads(args.num_threads)
    cache_path = args.exp_dir / "curve.json"
    cache: Dict[str, Dict[str, float]] = json.loads(cache_path.read_text()) if cache_path.exists() else {}
    tokenizer = Tokenizer(str(bpe_model(args.data_dir)))
    dev = args.data_dir / "fbank" / f"synth_cuts_{args.dev}.jsonl.gz"
    dargs = decode_parser().parse_args([
        "--exp-dir", str(args.exp_dir), "--bpe-model", str(bpe_model(args.data_dir)), "--test-sets", f"dev={dev}",
        "--chunk-size", str(args.chunk_size), "--left-context-frames", str(args.left_context_frames),
        "--blank-penalty", "0"])  # the search docs/cpu-training.md's curves were measured with
    real = real_cuts(args)
    key_of = f"chunk{args.chunk_size}-left{args.left_context_frames}-{args.dev}" + ("-real" if real else "")
    if args.avg > 1:
        key_of += f"-avg{args.avg}"
    rows = []
    valid = validation_losses(args.exp_dir)
    earlier: List[Dict] = []  # the last --avg checkpoints before this one
    for path in checkpoints(args.exp_dir):
        end = load_checkpoint(path)
        prev = earlier[0] if len(earlier) == args.avg else None
        key = f"{path.name}:{key_of}"
        if key not in cache:
            t0 = time.time()
            model = build_model(end["model_config"])
            weights = average_between(prev, end)
            model.load_state_dict({k: v.float() if v.is_floating_point() else v for k, v in weights.items()})
            model.eval()
            modes = output_modes(model.model_type)

            def scores(cuts: Path, prefix: str = "") -> Dict[str, float]:
                with torch.no_grad():
                    res = decode_set(model, tokenizer, str(cuts), dargs, modes)
                sn = score_corpus([(c, res["refs_n"][c], h) for c, h in res["hyps"][MODE_N].items()]).summary()
                got = {"wer": sn["wer"]}
                if MODE_P in modes:
                    pairs = [(c, res["refs_p"][c], h) for c, h in res["hyps"][MODE_P].items() if res["refs_p"][c]]
                    sp = score_corpus(pairs).summary()
                    got.update({k: sp[k] for k in ("pc_wer", "per", "punc_er", "case_er", "wer_c")})
                return {prefix + k: v for k, v in got.items()
                        if not prefix or REAL_PREFIX + k in FIELDS}

            out: Dict[str, float] = scores(dev)
            if real is not None:
                out.update(scores(real, REAL_PREFIX))
            first = (prev["model_avg_batches"] + 1) if prev is not None else 1
            out["averaged_batches"] = f"{first}..{end['model_avg_batches']}"
            cache[key] = out
            cache_path.write_text(json.dumps(cache, indent=1) + "\n")
            logging.info(f"{path.name} (batches {out['averaged_batches']}): WER {out['wer']:.2f}"
                         + (f", PC-WER {out['pc_wer']:.2f}, PER {out['per']:.2f}" if "pc_wer" in out else "")
                         + (f"; test_real WER {out['real_wer']:.2f}" if "real_wer" in out else "")
                         + f" [{time.time() - t0:.0f} s]")
        row = {"batch": int(end["batch_idx_train"]), "minutes": float(end.get("train_seconds", math.nan)) / 60,
               "audio_hours": float(end.get("audio_seconds", math.nan)) / 3600, **cache[key]}
        row.update(valid.get(row["batch"], {}))
        rows.append(row)
        # Keep only what averaging reads: a whole checkpoint also holds the model and optimizer state.
        kept = {k: end[k] for k in ("model_avg", "model_avg_batches") if k in end}
        earlier = (earlier + [kept])[-args.avg:]
    return rows


def real_cuts(args) -> Optional[Path]:
    """test_real's cut manifest for ``--real-cuts`` (auto: beside the synthetic corpus when made), or None."""
    if args.real_cuts == "none":
        return None
    if args.real_cuts == "auto":
        found = args.data_dir.parent / "real" / "fbank" / "real_cuts_test_real.jsonl.gz"
        return found if found.exists() else None
    path = Path(args.real_cuts)
    if not path.exists():
        raise SystemExit(f"--real-cuts {path} does not exist (prepare.sh --dataset real makes it)")
    return path


def curve_stem(avg: int) -> str:
    return "learning_curve" if avg == 1 else f"learning_curve_avg{avg}"


def validation_losses(exp_dir: Path) -> Dict[int, Dict[str, float]]:
    """batch -> the validation losses logged there (train.py validates at each time checkpoint);
    a later log (a resumed run) wins."""
    found: Dict[int, Dict[str, float]] = {}
    for log in sorted((exp_dir / "log").glob("log-train-*-0")):
        for line in log.read_text().splitlines():
            m = re.search(r"Validation at batch (\d+):", line)
            if not m:
                continue
            out = found.setdefault(int(m.group(1)), {})
            for k in ("valid_loss_n", "valid_loss_p"):
                try:
                    out[k] = float(line.split(f"'{k}': ")[1].split(",")[0].rstrip("}"))
                except (IndexError, ValueError):
                    pass
    return found


# ------------------------------------------------------------------ reporting


def minutes_to(rows: List[Dict[str, float]], threshold: float, key: str = "wer") -> Optional[float]:
    for r in rows:
        if r.get(key) is not None and r[key] <= threshold:
            return r["minutes"]
    return None


def write_csv(path: Path, rows: List[Dict[str, float]], extra: Optional[Dict[str, str]] = None) -> None:
    fields = (list(extra) if extra else []) + list(FIELDS)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({**(extra or {}), **{k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items()}})


def plot(path: Path, runs: Dict[str, List[Dict[str, float]]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    for ax, key, title in zip(axes, ("wer", "pc_wer", "per"), ("WER (N)", "PC-WER (P)", "PER (P)")):
        for name, rows in runs.items():
            pts = [(r["minutes"], r[key]) for r in rows if r.get(key) is not None]
            if pts:
                line = ax.plot(*zip(*pts), marker="o", label=name)[0]
                real = [(r["minutes"], r[REAL_PREFIX + key]) for r in rows if r.get(REAL_PREFIX + key) is not None]
                if real:  # the same run on recordings of people: dashed, its colour
                    ax.plot(*zip(*real), marker="x", ls="--", color=line.get_color(), label=f"{name} (test_real)")
        for t in THRESHOLDS:
            ax.axhline(t, color="grey", lw=0.5, ls="--")
        ax.set_title(title)
        ax.set_xlabel("minutes of training")
        ax.set_ylabel("%")
        ax.set_ylim(0, 110)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def fmt(v: Optional[float], nd: int = 1) -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.{nd}f}"


def table(runs: Dict[str, List[Dict[str, float]]]) -> str:
    heads = " | ".join(f"min to WER {t:g}%" for t in THRESHOLDS)
    lines = [f"| run | {heads} | best WER | its PC-WER | its PER | minutes | audio h seen | s audio/s |",
             "|---|" + "---|" * (len(THRESHOLDS) + 6)]
    for name, rows in runs.items():
        if not rows:
            lines.append(f"| {name} | " + "- | " * (len(THRESHOLDS) + 3) + "0 | 0 | - |")
            continue
        best = min(rows, key=lambda r: r["wer"])
        last = rows[-1]
        speed = last["audio_hours"] * 3600 / (last["minutes"] * 60) if last["minutes"] else math.nan
        lines.append(f"| {name} | " + " | ".join(fmt(minutes_to(rows, t)) for t in THRESHOLDS) + " | "
                     f"{fmt(best['wer'], 2)} | {fmt(best.get('pc_wer'), 2)} | {fmt(best.get('per'), 2)} | "
                     f"{fmt(last['minutes'])} | {fmt(last['audio_hours'], 2)} | {fmt(speed)} |")
    return "\n".join(lines)


def curve_table(rows: List[Dict[str, float]]) -> str:
    real = any(r.get("real_wer") is not None for r in rows)
    lines = ["| minutes | batch | audio h | WER | PC-WER | PER | PuncER | CaseER | valid L_N | valid L_P |"
             + (" test_real WER | test_real PC-WER |" if real else ""),
             "|---|---|---|---|---|---|---|---|---|---|" + ("---|---|" if real else "")]
    for r in rows:
        lines.append(f"| {fmt(r['minutes'])} | {r['batch']} | {fmt(r['audio_hours'], 2)} | {fmt(r['wer'], 2)} | "
                     f"{fmt(r.get('pc_wer'), 2)} | {fmt(r.get('per'), 2)} | {fmt(r.get('punc_er'), 2)} | "
                     f"{fmt(r.get('case_er'), 2)} | {fmt(r.get('valid_loss_n'))} | {fmt(r.get('valid_loss_p'))} |"
                     + (f" {fmt(r.get('real_wer'), 2)} | {fmt(r.get('real_pc_wer'), 2)} |" if real else ""))
    return "\n".join(lines)


def load_rows(exp_dir: Path, avg: int = 1) -> List[Dict[str, float]]:
    path = exp_dir / f"{curve_stem(avg)}.csv"
    if not path.exists():
        raise SystemExit(f"{path} not found: score the run first (learning_curve.py run ... --skip-train true"
                         + (f" --avg {avg}" if avg > 1 else "") + ")")
    rows = []
    with open(path) as f:
        for r in csv.DictReader(f):
            rows.append({k: (float(v) if v not in ("", None) else None) for k, v in r.items()})
    return rows


def main() -> None:
    setup_logging()
    args = get_parser().parse_args()
    if args.avg < 1:
        raise SystemExit(f"--avg must be >= 1, got {args.avg}")
    if args.cmd == "run":
        if args.eval_every <= 0 or args.minutes <= 0:
            raise SystemExit("--minutes and --eval-every must be > 0")
        args.exp_dir.mkdir(parents=True, exist_ok=True)
        if not args.skip_train:
            train(args)
        rows = score_checkpoints(args)
        if not rows:
            raise SystemExit(f"No checkpoint-*.pt in {args.exp_dir}")
        stem = curve_stem(args.avg)
        write_csv(args.exp_dir / f"{stem}.csv", rows)
        plot(args.exp_dir / f"{stem}.png", {args.exp_dir.name: rows})
        print(curve_table(rows))
        print()
        print(table({args.exp_dir.name: rows}))
    else:
        runs: Dict[str, List[Dict[str, float]]] = {}
        for item in args.runs.split(","):
            if "=" not in item:
                raise SystemExit(f"--runs expects name=exp_dir items, got {item!r}")
            name, d = item.split("=", 1)
            runs[name] = load_rows(Path(d), args.avg)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        plot(args.out.with_suffix(".png"), runs)
        text = table(runs)
        args.out.with_suffix(".md").write_text(text + "\n")
        with open(args.out.with_suffix(".csv"), "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["run"] + list(FIELDS))
            for name, rows in runs.items():
                for r in rows:
                    w.writerow([name] + [r.get(k) for k in FIELDS])
        print(text)


if __name__ == "__main__":
    main()
