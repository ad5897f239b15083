"""Interpolate a fine-tuned run's weights with the weights it started from (WiSE-FT).

Wortsman et al. (arXiv 2109.01903) found that the straight-line mix
``W * fine-tuned + (1 - W) * start`` of a fine-tuned model and its starting
point often keeps the fine-tuning's gains on the new data and the start's
accuracy elsewhere: here a run fine-tuned on new voices gains on held-out
voices (`test_ood`) and loses a little on the in-domain ones (`test`), and the
mix can keep both.

Usage:
  python -m zipformer_pc.training.interpolate --exp-dir EXP/conditioned --iter 4000 --avg 3 \\
      --start egs/synth/pretrained/conditioned.pt --weight 0.5 --out-dir EXP_WISE/conditioned

``--exp-dir/--iter/--avg`` choose the run's weights exactly as decoding and
export do; ``--start`` is a ``.pt`` file with ``model`` weights of the same
architecture (a shipped ``conditioned.pt``, or a ``checkpoint-*.pt`` of the
run it was started from: its last weights).  The mix is written to
``OUT_DIR/checkpoint-B.pt`` (B: the run's batch) with the run's counters and
arguments and its training logs copied, so that decoding, export and
``egs/synth/pretrain.sh --stage 3 --exp-dir ... --avg 1`` read it as
``--iter B --avg 1`` and log what it is.  It holds no optimizer state: it is
not for resuming.

Several runs fine-tuned from the same start mix the same way (a model soup,
Wortsman et al., arXiv 2203.05482): one ``--iter`` and ``--weight`` per
``--exp-dir``, the start weighted ``1 - sum(W)``:

  python -m zipformer_pc.training.interpolate --exp-dir EXP_A/conditioned EXP_B/conditioned \\
      --iter 3671 3309 --avg 1 --start egs/synth/pretrained/conditioned.pt --weight 0.4 0.2 \\
      --out-dir EXP_SOUP/conditioned

The first run names the checkpoint and lends its counters, arguments and logs.
"""

import argparse
import logging
import shutil
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

import torch

from zipformer_pc.logs import setup_logging
from zipformer_pc.training.checkpoint import averaged_weights, batch_checkpoints, load_checkpoint, save_checkpoint


def add_run_options(p: argparse.ArgumentParser, start: Optional[Path] = None) -> None:
    """``--exp-dir``, ``--iter``, ``--avg`` and ``--start``: the runs to mix and the weights they started
    from (``start``: its default; none: required)."""
    p.add_argument("--exp-dir", type=Path, nargs="+", required=True,
                   help="the fine-tuned run (or runs, all started from --start)")
    p.add_argument("--iter", type=int, nargs="+", required=True, help="its checkpoint-B.pt (one B per run)")
    p.add_argument("--avg", type=int, default=1, help="checkpoints averaged per run, as decode.py's --avg [1]")
    p.add_argument("--start", type=Path, required=start is None, default=start,
                   help=".pt with the weights the run started from" + (f" [{start}]" if start else ""))


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_options(p)
    p.add_argument("--weight", type=float, nargs="+", required=True,
                   help="W of W * run + (1 - W) * start: 1 is the run alone, 0 the start alone "
                        "(one W per run; the start gets 1 - their sum)")
    p.add_argument("--out-dir", type=Path, required=True, help="written: checkpoint-B.pt and log/")
    return p


def _check_same_architecture(run: Dict[str, torch.Tensor], other: Dict[str, torch.Tensor], what: str) -> None:
    missing, extra = sorted(set(run) - set(other)), sorted(set(other) - set(run))
    if missing or extra:
        raise ValueError(f"{what} are of another architecture: missing {missing[:5]}, "
                         f"unexpected {extra[:5]} ({len(missing)} / {len(extra)} in all)")
    for k, v in other.items():
        if v.shape != run[k].shape:
            raise ValueError(f"{what} are of another architecture: {k} is {tuple(v.shape)} there, "
                             f"{tuple(run[k].shape)} in the run")


def check_weights(weights: Sequence[float], runs: int) -> None:
    """One weight per run (at least one run), each within [0, 1], their sum at most 1 (the start gets the
    rest); ValueError otherwise."""
    if runs != len(weights) or not runs:
        raise ValueError(f"one weight per run: {runs} run(s), {len(weights)} weight(s)")
    if any(w < 0.0 for w in weights) or sum(weights) > 1.0 + 1e-9:
        raise ValueError(f"the weights must be within [0, 1] and sum to at most 1, got {list(weights)}")


def mix(runs: Sequence[Dict[str, torch.Tensor]], weights: Sequence[float],
        start: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
    """``sum(W_i * run_i) + (1 - sum(W_i)) * start`` for floating tensors (float32, mixed in float64);
    other tensors (counters, indices) are the first run's.  All must hold the same names and shapes."""
    check_weights(weights, len(runs))
    _check_same_architecture(runs[0], start, "the start weights")
    for i, run in enumerate(runs[1:], 2):
        _check_same_architecture(runs[0], run, f"run {i}'s weights")
    rest = 1.0 - sum(weights)
    out = {}
    for k, v in runs[0].items():
        if v.is_floating_point():
            acc = rest * start[k].to(torch.float64)
            for w, run in zip(weights, runs):
                acc = acc + w * run[k].to(torch.float64)
            out[k] = acc.to(torch.float32)
        else:
            out[k] = v.clone()
    return out


def interpolate(run: Dict[str, torch.Tensor], start: Dict[str, torch.Tensor], weight: float) -> Dict[str, torch.Tensor]:
    """``weight * run + (1 - weight) * start``: :func:`mix` of one run."""
    return mix([run], [weight], start)


def main(argv=None) -> None:
    args = get_parser().parse_args(argv)
    setup_logging()
    if not len(args.exp_dir) == len(args.iter) == len(args.weight):
        raise SystemExit(f"give one --iter and one --weight per --exp-dir: {len(args.exp_dir)} run(s), "
                         f"{len(args.iter)} --iter, {len(args.weight)} --weight")
    if any(args.out_dir.resolve() == e.resolve() for e in args.exp_dir):
        raise SystemExit("--out-dir must not be the run's --exp-dir")
    try:
        ws: List[Dict[str, Any]] = [averaged_weights(e, avg=args.avg, iteration=b)
                                    for e, b in zip(args.exp_dir, args.iter)]
        start = load_checkpoint(args.start)
        if "model" not in start:
            raise ValueError(f"{args.start} holds no 'model' weights")
        mixed = mix([w["model"] for w in ws], args.weight, start["model"])
    except (ValueError, FileNotFoundError) as e:
        raise SystemExit(f"Cannot interpolate: {e}")
    exp, it = args.exp_dir[0], args.iter[0]
    end = load_checkpoint(exp / f"checkpoint-{it}.pt")
    command = " ".join(["python -m zipformer_pc.training.interpolate", *(sys.argv[1:] if argv is None else argv)])
    first, last = ws[0]["batches"]
    start_desc = start.get("averaged") or f"its weights after batch {start.get('batch_idx_train', '?')}"
    parts = [f"{args.weight[0]:g} x the run's {ws[0]['desc']} ({ws[0]['how']})"]
    parts += [f"{wt:g} x {e}'s {w['desc']} ({w['how']})" for e, wt, w in zip(args.exp_dir[1:], args.weight[1:], ws[1:])]
    rest = 1 - sum(args.weight)
    if rest > 1e-9:
        parts.append(f"{rest:g} x the weights it started from ({args.start}: {start_desc})")
    how = " + ".join(parts)  # weight 0 on the start: its history (the models before it) is not part of the mix
    state: Dict[str, Any] = {
        "model": mixed, "model_avg": mixed, "model_avg_batches": last, "model_config": ws[0]["model_config"],
        "interpolated": {"weights": list(args.weight), "how": how, "batches": [first, last],
                         "runs": [str(e) for e in args.exp_dir], "start": str(args.start), "command": command},
        # the first run's counters, so that cards and logs report the training behind the mix; keep_last_k 0:
        # this directory's one checkpoint is all there is (--iter B --avg 1 averages from its start)
        "args": {**(end.get("args") or {}), "keep_last_k": 0},
    }
    for k in ("batch_idx_train", "optimizer_steps", "train_seconds", "audio_seconds", "epoch"):
        if k in end:
            state[k] = end[k]
    args.out_dir.mkdir(parents=True, exist_ok=True)
    # an earlier mix written here is replaced; anything else (a training run's checkpoints) is kept and refused
    others = [p for p in batch_checkpoints(args.out_dir) if "interpolated" not in load_checkpoint(p)]
    if others:
        raise SystemExit(f"{args.out_dir} holds checkpoints of a training run ({others[0].name}): give an empty "
                         "--out-dir")
    for p in batch_checkpoints(args.out_dir):
        p.unlink()
    save_checkpoint(args.out_dir / f"checkpoint-{it}.pt", state)
    if (exp / "log").is_dir():
        shutil.rmtree(args.out_dir / "log", ignore_errors=True)
        shutil.copytree(exp / "log", args.out_dir / "log")
    logging.info(f"Wrote {args.out_dir / f'checkpoint-{it}.pt'}: {how}")


if __name__ == "__main__":
    main()
