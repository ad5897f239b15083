#!/usr/bin/env python3
"""Forward+backward time and peak memory of the Zipformer encoder on this CPU.

Usage:
  python benchmarks/encoder_speed.py                       # tiny and paper, 2 x 10 s
  python benchmarks/encoder_speed.py --configs tiny --seconds 5 --seed 3
  python benchmarks/encoder_speed.py --chunk-size 32 --left-context-frames 128

For each configuration a fresh Python process (so the peak-memory figure
belongs to that configuration alone) builds the encoder with a fixed seed,
makes a fixed batch of random 80-dim "fbank" features (``--batch``
utterances of ``--seconds`` seconds at 100 frames/s, the second one 20%
shorter so padding is exercised), and runs ``--warmup`` untimed and
``--repeats`` timed training steps of forward + backward of a dummy loss
(``out.pow(2).mean()``) with a fixed chunk size / left context (default
32 / 128 frames, i.e. simulated streaming masks).

Printed per configuration: parameter count, mean and min forward time,
mean and min forward+backward time, and peak resident memory (ru_maxrss of
the worker process) together with its increase over the resident memory
measured just before the first forward (model and batch already built).
Prints the figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from typing import Dict, List

from zipformer_pc.layout import DEFAULT_CHUNK_SIZE, DEFAULT_LEFT_CONTEXT_FRAMES


def _rss_now_mb() -> float:
    """Current resident set size in MB (Linux /proc; falls back to ru_maxrss)."""
    try:
        with open("/proc/self/statm") as f:
            pages = int(f.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _peak_rss_mb() -> float:
    # ru_maxrss is in kilobytes on Linux
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_worker(args: argparse.Namespace) -> Dict[str, float]:
    import torch

    from zipformer_pc.model.zipformer import EncoderConfig, ZipformerEncoder, count_parameters

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    encoder = ZipformerEncoder(EncoderConfig.from_name(args.worker)).train()
    frames = int(args.seconds * 100)
    x = torch.randn(args.batch, frames, 80)
    x_lens = torch.full((args.batch,), frames, dtype=torch.int64)
    if args.batch > 1:
        x_lens[1] = int(frames * 0.8)

    def step() -> Dict[str, float]:
        encoder.zero_grad(set_to_none=True)
        t0 = time.perf_counter()
        out, _ = encoder(x, x_lens, args.chunk_size, args.left_context_frames)
        t1 = time.perf_counter()
        out.pow(2).mean().backward()
        t2 = time.perf_counter()
        return {"forward": t1 - t0, "total": t2 - t0, "out_frames": out.size(1)}

    rss_before = _rss_now_mb()
    for _ in range(args.warmup):
        step()
    results = [step() for _ in range(args.repeats)]
    fwd = [r["forward"] for r in results]
    tot = [r["total"] for r in results]
    peak = _peak_rss_mb()
    return {
        "config": args.worker,
        "params": count_parameters(encoder),
        "out_frames": results[-1]["out_frames"],
        "fwd_mean": sum(fwd) / len(fwd),
        "fwd_min": min(fwd),
        "tot_mean": sum(tot) / len(tot),
        "tot_min": min(tot),
        "peak_rss_mb": peak,
        "peak_increase_mb": peak - rss_before,
    }


def main(argv: List[str] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", default="tiny,paper", help="comma list of ENCODER_CONFIGS names")
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=10.0, help="utterance length")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2, help="torch intra-op threads")
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--chunk-size", type=int, default=DEFAULT_CHUNK_SIZE, help="50 Hz frames, -1 = full")
    parser.add_argument("--left-context-frames", type=int, default=DEFAULT_LEFT_CONTEXT_FRAMES)
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.worker is not None:
        print(json.dumps(run_worker(args)))
        return

    print(
        f"batch {args.batch} x {args.seconds:g} s (second utterance 80%), seed {args.seed}, "
        f"{args.threads} threads, chunk {args.chunk_size}, left context "
        f"{args.left_context_frames}, {args.warmup} warm-up + {args.repeats} timed steps"
    )
    header = (
        f"{'config':<8} {'params':>12} {'T_out':>6} {'fwd mean':>9} {'fwd min':>8} "
        f"{'fwd+bwd mean':>13} {'fwd+bwd min':>12} {'peak RSS':>10} {'peak incr.':>11}"
    )
    print(header)
    print("-" * len(header))
    passthrough = [
        "--batch", str(args.batch), "--seconds", str(args.seconds), "--seed", str(args.seed),
        "--threads", str(args.threads), "--warmup", str(args.warmup),
        "--repeats", str(args.repeats), "--chunk-size", str(args.chunk_size),
        "--left-context-frames", str(args.left_context_frames),
    ]
    for name in [c for c in args.configs.split(",") if c]:
        proc = subprocess.run(
            [sys.executable, os.path.abspath(__file__), "--worker", name, *passthrough],
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            print(f"{name:<8} FAILED\n{proc.stderr}")
            continue
        r = json.loads(proc.stdout.strip().splitlines()[-1])
        print(
            f"{r['config']:<8} {r['params']:>12,} {r['out_frames']:>6} "
            f"{r['fwd_mean']:>8.3f}s {r['fwd_min']:>7.3f}s {r['tot_mean']:>12.3f}s "
            f"{r['tot_min']:>11.3f}s {r['peak_rss_mb']:>8.0f}MB {r['peak_increase_mb']:>9.0f}MB"
        )


if __name__ == "__main__":
    main()
