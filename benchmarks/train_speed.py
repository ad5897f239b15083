#!/usr/bin/env python3
"""Training throughput and peak memory of each model type on this CPU.

Usage:
  python benchmarks/train_speed.py                       # tiny encoder, all model types
  python benchmarks/train_speed.py --encoder paper --model-types conditioned --steps 2
  python benchmarks/train_speed.py --model-types conditioned --losses full,pruned --vocab-size 500

A fixed random batch (``--batch-size`` utterances of ``--seconds`` s, P and N
targets of realistic lengths) goes through forward, backward and a ScaledAdam
step ``--steps`` times after one warm-up step, for each transducer loss of
``--losses`` (``full``: torchaudio's RNN-T over the whole lattice;
``pruned``: k2's pruned RNN-T, or without k2 zipformer_pc.model.pruned_rnnt).
Each (model type, loss) runs in a fresh process.  Prints seconds of audio
trained per second of wall time and the peak resident memory of that
process.  Asserts nothing.
"""

import argparse
import resource
import subprocess
import sys
import time

import torch

from zipformer_pc.model.loss import LossConfig
from zipformer_pc.model.transducer import HeadConfig, build_model, head_dim, make_model_config
from zipformer_pc.modes import MODEL_TYPES
from zipformer_pc.training.optim import make_optimizer
from zipformer_pc.model.zipformer import count_parameters


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--encoder", default="tiny")
    p.add_argument("--model-types", default=",".join(MODEL_TYPES))
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--seconds", type=float, default=8.0)
    p.add_argument("--vocab-size", type=int, default=256)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--num-threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--losses", default="full", help="comma list of full, pruned")
    p.add_argument("--prune-range", type=int, default=5)
    p.add_argument("--convnext-hidden-ratio", type=int, default=None,
                   help="front-end ConvNeXt expansion (encoder config default if not given; 0: no block)")
    p.add_argument("--autocast", default="none", choices=("none", "bf16"),
                   help="bf16: forward under torch.autocast(cpu, bfloat16) (matrix products in bfloat16)")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if not args.worker:
        print(f"encoder {args.encoder}, batch {args.batch_size} x {args.seconds:.1f} s, vocabulary "
              f"{args.vocab_size}, {args.num_threads} threads, autocast {args.autocast}")
        print("| model type | loss | parameters | s audio / s | s per step | peak RSS (MB) |")
        print("|---|---|---|---|---|---|")
        shared = ["--encoder", args.encoder, "--batch-size", str(args.batch_size), "--seconds", str(args.seconds),
                  "--vocab-size", str(args.vocab_size), "--steps", str(args.steps), "--num-threads",
                  str(args.num_threads), "--seed", str(args.seed), "--prune-range", str(args.prune_range)]
        if args.convnext_hidden_ratio is not None:
            shared += ["--convnext-hidden-ratio", str(args.convnext_hidden_ratio)]
        shared += ["--autocast", args.autocast]
        for mt in args.model_types.split(","):
            for loss in args.losses.split(","):
                cmd = [sys.executable, __file__, "--worker", "--model-types", mt, "--losses", loss, *shared]
                r = subprocess.run(cmd, capture_output=True, text=True)
                print(r.stdout.strip() if r.returncode == 0 else f"| {mt} | {loss} | failed: {r.stderr[-300:]} |",
                      flush=True)
        return
    torch.set_num_threads(args.num_threads)
    from zipformer_pc.model.loss import resolve_backend

    loss_name = args.losses
    backend = resolve_backend(loss_name)

    frames = int(args.seconds * 100)
    words = int(args.seconds * 3)
    g = torch.Generator().manual_seed(args.seed)
    feats = torch.randn(args.batch_size, frames, 80, generator=g)
    lens = torch.full((args.batch_size,), frames)
    tn = [torch.randint(3, args.vocab_size, (int(words * 1.3),), generator=g).tolist() for _ in range(args.batch_size)]
    tp = [t + [4, 5] for t in tn]
    audio = args.batch_size * args.seconds
    mt = args.model_types
    torch.manual_seed(args.seed)
    head = HeadConfig(model_type=mt, vocab_size=args.vocab_size, decoder_dim=head_dim(args.encoder),
                      joiner_dim=head_dim(args.encoder), with_simple_proj=backend == "pruned")
    overrides = {} if args.convnext_hidden_ratio is None else {"convnext_hidden_ratio": args.convnext_hidden_ratio}
    model = build_model(make_model_config(args.encoder, overrides, head))
    model.train()
    opt = make_optimizer("scaled_adam", model.parameters())
    cfg = LossConfig(backend=backend, prune_range=args.prune_range)
    times = []
    for step in range(args.steps + 1):
        t0 = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.autocast == "bf16"):
            out = model(feats, lens, tn, tp, alpha=0.5, loss_cfg=cfg)
        out["loss"].backward()
        opt.step()
        opt.zero_grad()
        if step > 0:
            times.append(time.perf_counter() - t0)
    per_step = sum(times) / len(times)
    print(f"| {mt} | {loss_name} | {count_parameters(model):,} | {audio / per_step:.1f} | {per_step:.2f} | "
          f"{peak_rss_mb():.0f} |")


if __name__ == "__main__":
    main()
