#!/usr/bin/env python3
"""Time and peak memory of the plain-PyTorch pruned RNN-T loss at LibriSpeech shapes.

Usage:
  nice -n 15 .venv/bin/python benchmarks/loss_speed.py                       # 50x400x100x500 and 50x400x200x500
  .venv/bin/python benchmarks/loss_speed.py --shapes 16x400x100x500 --rounds 3 --lattice-dtypes float64,float32
  .venv/bin/python benchmarks/loss_speed.py --device cuda --shapes 50x400x100x500   # on a GPU
  # against another version of the loss, e.g. the one before docs/gpu-check.md's changes:
  mkdir -p /tmp/old && git show f5741b4:zipformer_pc/model/pruned_rnnt.py > /tmp/old/pruned_rnnt_old.py
  PYTHONPATH=/tmp/old .venv/bin/python benchmarks/loss_speed.py \
      --losses before=pruned_rnnt_old,after=zipformer_pc.model.pruned_rnnt

Each shape is B x T x U x V: B utterances of T encoder frames (after the
subsampling: 400 frames are 16 s of audio) and U tokens, a V-token vocabulary;
the joiner and simple projections have LibriSpeech's paper-size dimensions
(encoder and predictor outputs 512, joiner 512; ``--dim``).  Lengths vary over
the batch as in a bucketed batch (T from 0.9 T to T, U from 0.8 U to U).  Each
run is one forward and backward of :func:`zipformer_pc.model.pruned_rnnt.pruned_rnnt_loss`
(the simple loss, its pruning bounds, the pruned joiner and the pruned
lattice), as a training step makes it, with ``--prune-range`` 5.

Each ``--losses`` entry is a version of the module (``NAME=MODULE``; one
without ``lattice_dtype`` runs float64 only).  Peak memory: every (loss,
shape, dtype) runs one step in a process of its own, the growth of the peak
resident memory (VmHWM) over what the inputs took on a CPU,
``max_memory_allocated`` over the inputs on CUDA.  Time: one process runs
``--rounds`` rounds, each round every configuration once in turn (on a shared
machine the load drifts; interleaving spreads it evenly), after one warm-up
each; reported are the median and the fastest round, and the median time in
the lattice recursions (the simple lattice and the pruned one, forward and
backward).  Prints a markdown table (docs/gpu-check.md holds the measured one).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from zipformer_pc.machine import peak_rss, reset_peak_rss

ROOT = Path(__file__).resolve().parents[1]


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", default="50x400x100x500,50x400x200x500", help="Comma list of BxTxUxV")
    p.add_argument("--losses", default="zipformer_pc.model.pruned_rnnt",
                   help="Comma list of NAME=MODULE (or MODULE): the versions of the loss to time")
    p.add_argument("--lattice-dtypes", default="float64,float32",
                   help="The lattice recursions' precisions (pruned_rnnt_loss(lattice_dtype=...))")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=2, help="torch threads (CPU)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--dim", type=int, default=512, help="Encoder, predictor and joiner dimension")
    p.add_argument("--prune-range", type=int, default=5)
    p.add_argument("--out-json", default="", help="Also write the rows here")
    p.add_argument("--memory-of", default="", help=argparse.SUPPRESS)  # MODULE:SHAPE:DTYPE, a child's job
    return p


def parse_shape(s: str):
    b, t, u, v = (int(x) for x in s.lower().split("x"))
    return b, t, u, v


def inputs(shape, dim: int, device, seed: int = 0):
    import torch

    from zipformer_pc.model.joiner import Joiner

    b, t, u, v = shape
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    joiner = Joiner(dim, dim, dim, v).to(device)
    am_proj, lm_proj = torch.nn.Linear(dim, v).to(device), torch.nn.Linear(dim, v).to(device)
    t_lens = torch.linspace(t, int(0.9 * t), b).round().long()
    u_lens = torch.linspace(u, int(0.8 * u), b).round().long()
    y = torch.randint(1, v, (b, u), generator=g)
    enc = torch.randn(b, t, dim, generator=g).to(device).requires_grad_()
    dec = torch.randn(b, u + 1, dim, generator=g).to(device).requires_grad_()
    return enc, t_lens.to(device), dec, joiner, am_proj, lm_proj, y.to(device), u_lens.to(device)


class Config:
    """One version of the loss at one lattice dtype, with a timer around its lattice recursions."""

    def __init__(self, name: str, module: str, dtype: str, device) -> None:
        import importlib
        import inspect

        import torch

        self.name, self.module_name, self.device = name, module, device
        self.mod = importlib.import_module(module)
        self.takes_dtype = "lattice_dtype" in inspect.signature(self.mod.pruned_rnnt_loss).parameters
        self.dtype = dtype if self.takes_dtype else "float64"
        self.extra = {"lattice_dtype": getattr(torch, dtype)} if self.takes_dtype else {}
        self.in_lattice = 0.0
        cls = self.mod._LatticeLoss
        if not getattr(cls, "_timed", False):
            cls.forward, cls.backward = self._timed(cls.forward), self._timed(cls.backward)
            cls._timed = True
        cls._config = self

    def sync(self) -> None:
        import torch

        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def _timed(self, f):
        mod = self.mod

        def wrapper(*a, **k):
            cfg = mod._LatticeLoss._config
            cfg.sync()
            t0 = time.perf_counter()
            r = f(*a, **k)
            cfg.sync()
            cfg.in_lattice += time.perf_counter() - t0
            return r
        return staticmethod(wrapper)

    def step(self, x, prune_range: int):
        self.mod._LatticeLoss._config = self
        simple, pruned = self.mod.pruned_rnnt_loss(*x, prune_range=prune_range, lm_scale=0.25, **self.extra)
        (0.5 * simple + pruned).backward()
        for t in (x[0], x[2]):
            t.grad = None
        return simple.item(), pruned.item()


def memory_of(spec: str, args) -> dict:
    """Peak memory of one step of ``MODULE:SHAPE:DTYPE`` over the inputs, in this process."""
    import torch

    module, shape, dtype = spec.split(":")
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    x = inputs(parse_shape(shape), args.dim, device)
    cfg = Config(module, module, dtype, device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
    else:
        base = reset_peak_rss()
    losses = cfg.step(x, args.prune_range)
    peak = (torch.cuda.max_memory_allocated(device) - base) if device.type == "cuda" else peak_rss() - base
    return {"peak_memory_gb": peak / 2**30, "simple_loss": losses[0], "pruned_loss": losses[1]}


def main(argv=None) -> int:
    args = get_parser().parse_args(argv)
    if args.memory_of:
        print(json.dumps(memory_of(args.memory_of, args)))
        return 0
    import torch

    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    losses = [(e.split("=", 1) if "=" in e else (e, e)) for e in args.losses.split(",") if e]
    dtypes = [d for d in args.lattice_dtypes.split(",") if d]
    path = os.pathsep.join([str(ROOT)] + [x for x in os.environ.get("PYTHONPATH", "").split(os.pathsep) if x])
    rows = []
    for shape in [s for s in args.shapes.split(",") if s]:
        x = inputs(parse_shape(shape), args.dim, device)
        configs = []
        for name, module in losses:
            for dtype in dtypes:
                cfg = Config(name, module, dtype, device)
                if cfg.dtype == dtype:  # a version without the option: once, in float64
                    configs.append(cfg)
        times = {id(c): [] for c in configs}
        lattice = {id(c): [] for c in configs}
        for c in configs:
            c.step(x, args.prune_range)  # warm-up
        for _ in range(args.rounds):
            for c in configs:
                c.in_lattice = 0.0
                c.sync()
                t0 = time.perf_counter()
                c.step(x, args.prune_range)
                c.sync()
                times[id(c)].append(time.perf_counter() - t0)
                lattice[id(c)].append(c.in_lattice)
        del x
        for c in configs:
            cmd = [sys.executable, __file__, "--memory-of", f"{c.module_name}:{shape}:{c.dtype}",
                   "--threads", str(args.threads), "--device", args.device, "--dim", str(args.dim),
                   "--prune-range", str(args.prune_range)]
            r = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": path})
            if r.returncode != 0:
                print(f"{c.name} {shape} {c.dtype}: failed\n{r.stderr[-2000:]}", file=sys.stderr)
                return 1
            mem = json.loads(r.stdout.strip().splitlines()[-1])
            rows.append({"loss": c.name, "shape": shape, "lattice_dtype": c.dtype, "device": args.device,
                         "threads": args.threads, "seconds": statistics.median(times[id(c)]),
                         "fastest_seconds": min(times[id(c)]), "all_seconds": times[id(c)],
                         "lattice_seconds": statistics.median(lattice[id(c)]), **mem})
            print(f"# {c.name} {shape} {c.dtype}: {rows[-1]['seconds']:.2f} s", file=sys.stderr, flush=True)
    print(f"\nDevice {args.device}, {args.threads} torch thread(s), {args.rounds} interleaved rounds after a "
          f"warm-up, forward + backward; peak: growth of the peak memory over the inputs\n")
    print("| loss | B x T x U x V | lattice dtype | seconds, median (fastest) | of which lattice recursions | "
          "peak memory (GB) | simple loss | pruned loss |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['loss']} | {r['shape']} | {r['lattice_dtype']} | {r['seconds']:.2f} ({r['fastest_seconds']:.2f}) "
              f"| {r['lattice_seconds']:.2f} | {r['peak_memory_gb']:.2f} | {r['simple_loss']:.1f} | "
              f"{r['pruned_loss']:.1f} |")
    if args.out_json:
        Path(args.out_json).write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
