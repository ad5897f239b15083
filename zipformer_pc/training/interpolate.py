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
"""

import argparse
import logging
import shutil
import sys
from pathlib import Path
from typing import Any, Dict

import torch

from zipformer_pc.training.checkpoint import averaged_weights, batch_checkpoints, load_checkpoint, save_checkpoint


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--exp-dir", type=Path, required=True, help="the fine-tuned run")
    p.add_argument("--iter", type=int, required=True, help="its checkpoint-B.pt")
    p.add_argument("--avg", type=int, default=1, help="checkpoints averaged, as decode.py's --avg")
    p.add_argument("--start", type=Path, required=True, help=".pt with the weights the run started from")
    p.add_argument("--weight", type=float, required=True,
                   help="W of W * run + (1 - W) * start: 1 is the run alone, 0 the start alone")
    p.add_argument("--out-dir", type=Path, required=True, help="written: checkpoint-B.pt and log/")
    return p


def interpolate(run: Dict[str, torch.Tensor], start: Dict[str, torch.Tensor], weight: float) -> Dict[str, torch.Tensor]:
    """``weight * run + (1 - weight) * start`` for floating tensors (float32, mixed in float64);
    other tensors (counters, indices) are the run's.  The two must hold the same names and shapes."""
    if not 0.0 <= weight <= 1.0:
        raise ValueError(f"the weight must be within [0, 1], got {weight}")
    missing, extra = sorted(set(run) - set(start)), sorted(set(start) - set(run))
    if missing or extra:
        raise ValueError(f"the start weights are of another architecture: missing {missing[:5]}, "
                         f"unexpected {extra[:5]} ({len(missing)} / {len(extra)} in all)")
    out = {}
    for k, v in run.items():
        s = start[k]
        if s.shape != v.shape:
            raise ValueError(f"the start weights are of another architecture: {k} is {tuple(s.shape)} "
                             f"there, {tuple(v.shape)} in the run")
        if v.is_floating_point():
            out[k] = (weight * v.to(torch.float64) + (1.0 - weight) * s.to(torch.float64)).to(torch.float32)
        else:
            out[k] = v.clone()
    return out


def main(argv=None) -> None:
    args = get_parser().parse_args(argv)
    logging.basicConfig(format="%(asctime)s %(levelname)s [%(filename)s:%(lineno)d] %(message)s", level=logging.INFO)
    if args.out_dir.resolve() == args.exp_dir.resolve():
        raise SystemExit("--out-dir must not be the run's --exp-dir")
    try:
        w = averaged_weights(args.exp_dir, avg=args.avg, iteration=args.iter)
        start = load_checkpoint(args.start)
        if "model" not in start:
            raise ValueError(f"{args.start} holds no 'model' weights")
        mixed = interpolate(w["model"], start["model"], args.weight)
    except (ValueError, FileNotFoundError) as e:
        raise SystemExit(f"Cannot interpolate: {e}")
    end = load_checkpoint(args.exp_dir / f"checkpoint-{args.iter}.pt")
    command = " ".join(["python -m zipformer_pc.training.interpolate", *(sys.argv[1:] if argv is None else argv)])
    first, last = w["batches"]
    start_desc = start.get("averaged") or f"its weights after batch {start.get('batch_idx_train', '?')}"
    how = (f"{args.weight:g} x the run's {w['desc']} ({w['how']}) + {1 - args.weight:g} x the weights it "
           f"started from ({args.start}: {start_desc})")
    state: Dict[str, Any] = {
        "model": mixed, "model_avg": mixed, "model_avg_batches": last, "model_config": w["model_config"],
        "interpolated": {"weight": args.weight, "how": how, "batches": [first, last], "run": str(args.exp_dir),
                         "start": str(args.start), "command": command},
        # the run's counters, so that cards and logs report the training behind the mix; keep_last_k 0:
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
    save_checkpoint(args.out_dir / f"checkpoint-{args.iter}.pt", state)
    if (args.exp_dir / "log").is_dir():
        shutil.rmtree(args.out_dir / "log", ignore_errors=True)
        shutil.copytree(args.exp_dir / "log", args.out_dir / "log")
    logging.info(f"Wrote {args.out_dir / f'checkpoint-{args.iter}.pt'}: {how}")


if __name__ == "__main__":
    main()
