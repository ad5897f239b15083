#!/usr/bin/env python3
"""Training throughput and peak memory of each model type on this CPU.

Usage:
  python benchmarks/train_speed.py                       # tiny encoder, all model types
  python benchmarks/train_speed.py --encoder paper --model-types conditioned --steps 2

A fixed random batch (``--batch-size`` utterances of ``--seconds`` s, P and N
targets of realistic lengths) goes through forward, backward and a ScaledAdam
step ``--steps`` times after one warm-up step.  Prints seconds of audio
trained per second of wall time and the peak resident memory of the process.
Asserts nothing.
"""

import argparse
import resource
import time

import torch

from zipformer_pc.loss import LossConfig
from zipformer_pc.model import MODEL_TYPES, HeadConfig, build_model, make_model_config
from zipformer_pc.optim import make_optimizer
from zipformer_pc.zipformer import count_parameters


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
    args = p.parse_args()
    torch.set_num_threads(args.num_threads)

    frames = int(args.seconds * 100)
    words = int(args.seconds * 3)
    g = torch.Generator().manual_seed(args.seed)
    feats = torch.randn(args.batch_size, frames, 80, generator=g)
    lens = torch.full((args.batch_size,), frames)
    tn = [torch.randint(3, args.vocab_size, (int(words * 1.3),), generator=g).tolist() for _ in range(args.batch_size)]
    tp = [t + [4, 5] for t in tn]
    audio = args.batch_size * args.seconds
    small = args.encoder == "tiny"
    print(f"encoder {args.encoder}, batch {args.batch_size} x {args.seconds:.1f} s, {args.num_threads} threads, "
          f"full RNN-T loss (torchaudio)")
    print("| model type | parameters | s audio / s | s per step | peak RSS (MB) |")
    print("|---|---|---|---|---|")
    for mt in args.model_types.split(","):
        torch.manual_seed(args.seed)
        head = HeadConfig(model_type=mt, vocab_size=args.vocab_size, decoder_dim=256 if small else 512,
                          joiner_dim=256 if small else 512)
        model = build_model(make_model_config(args.encoder, {}, head))
        model.train()
        opt = make_optimizer("scaled_adam", model.parameters())
        times = []
        for step in range(args.steps + 1):
            t0 = time.perf_counter()
            out = model(feats, lens, tn, tp, alpha=0.5, loss_cfg=LossConfig(backend="full"))
            out["loss"].backward()
            opt.step()
            opt.zero_grad()
            if step > 0:
                times.append(time.perf_counter() - t0)
        per_step = sum(times) / len(times)
        print(f"| {mt} | {count_parameters(model):,} | {audio / per_step:.1f} | {per_step:.2f} | {peak_rss_mb():.0f} |")


if __name__ == "__main__":
    main()
