#!/usr/bin/env python3
"""The GPU check: one command that says, in under 8 minutes on a CUDA machine,
whether this project's training, checkpoints, decoding and export work there
and how fast and large its batches can be, before a LibriSpeech run is spent
on finding out (docs/gpu-check.md).

Usage:
  # on the GPU machine, from a source tree (or with the project installed as a wheel)
  PYTHONPATH=. python benchmarks/gpu_check.py --out-json gpu_check.json
  # the CPU smoke run the test suite makes (tiny encoder, a few small steps, gloo)
  python benchmarks/gpu_check.py --device cpu --tiny --out-json /tmp/gpu_check.json

What the GPU machine needs: torch (a CUDA build), numpy, onnx and onnxruntime
(there already), sentencepiece, and this project: the source tree with
``PYTHONPATH=.``, or its wheel (``pip wheel --no-deps .``) installed with
``pip install --no-deps``.  Nothing else: no lhotse, no kaldialign, no TTS, no
torchaudio, no k2 (with k2 importable the pruned loss is k2's, and the JSON
says so).  The check imports no such module: it refuses them at import time,
as the GPU machine would, and its JSON lists every third-party module it
loaded (``imports``).

The data are generated, shaped like LibriSpeech's training batches, from
``--seed``: 80-dim fbank-like features; utterance durations drawn like
LibriSpeech's (7 in 10 between 12 and 17 s, the rest spread over 2..12 s,
mean about 12.6 s), grouped into duration buckets as the training sampler
does and packed up to ``--max-duration`` seconds per batch; N token ids at
about ``--tokens-per-second`` (2.5) from a ``--vocab-size`` (500) BPE
vocabulary, and a P sequence about 12% longer (case and marks) for every
utterance.

Stages, each timed and each caught (a failure is reported, the next stage
runs), within ``--time-budget`` seconds (a stage that no longer fits is
skipped and listed; training stops at its share of the budget):

1. train: for each ``--model-types`` (conditioned, two-decoder) and
   ``--dtypes`` (fp16 with its GradScaler, bf16; CPU: fp32, bf16) a fresh
   ``--encoder`` model (paper; ``--tiny``: tiny) with train.py's own
   options and defaults for that encoder, trained by train.py's own step
   (``Trainer.train_batch``): ``--repeat-steps`` steps on one repeated
   batch (the loss must fall), then up to ``--steps`` steps on fresh
   batches (speed, memory), then ``--sync-steps`` steps whose host-device
   synchronisations are counted;
2. checkpoint: a checkpoint written from the trained (GPU) weights, loaded
   in a separate process that sees no GPU, through the loader decoding and
   export use; its encoder output compared with the GPU's;
3. decode: a few utterances encoded on the device (masked chunked forward
   and true chunk-by-chunk streaming, compared) and searched with greedy
   and modified beam search in every searched mode;
4. onnx: the first model exported to ONNX and checked with onnxruntime
   (zipformer_pc.export.onnx_export: it runs every file once);
5. oom_scan: one training step at each ``--oom-scan`` batch size on the
   longest utterances with full attention, until one runs out of memory;
6. ddp: ``--ddp-world-sizes`` processes training a few steps under
   DistributedDataParallel (NCCL on a GPU, gloo on a CPU), with the
   validation reduction train.py makes; 2 processes share the one GPU when
   there is only one (NCCL may refuse that: reported either way).

Figures (the JSON ``--out-json``, and a markdown table on stdout):

* ``audio_seconds_per_second``: seconds of audio trained per second of step
  time (forward, backward, optimizer, running average; the device waited
  for), over the steps after the first ``--warmup-steps``;
* ``step_time_s``: p50 / p90 / max of those steps, and the first step's;
* ``peak_memory_gb``: torch.cuda.max_memory_allocated over the steps;
* ``repeated_batch``: the losses on the repeated batch and whether they fall;
* ``nonfinite_steps``: steps whose loss was not finite (skipped), and for
  fp16 ``scaler_skipped_steps``: updates the GradScaler skipped (inf/NaN
  gradients: normal for a few steps while it finds its scale);
* ``host_syncs``: per step, the synchronising CUDA calls torch's sync debug
  mode warns about (with the source lines that made them), and from the
  profiler the count of ``cudaStreamSynchronize`` and of
  ``aten::_local_scalar_dense`` (a tensor read on the host); on a CPU only
  the latter, a proxy (every ``.item()``, CPU tensors included);
* ``oom_scan``: per batch size the peak memory and whether it fitted;
  ``largest_fitting_max_duration``.
"""

import argparse
import copy
import gc
import importlib.abc
import json
import logging
import math
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import numpy as np

from zipformer_pc.logs import setup_logging

ROOT = Path(__file__).resolve().parents[1]

#: packages the GPU machine does not have and the check must not need: refused at import time
FORBIDDEN_IMPORTS = ("lhotse", "kaldialign", "soundfile", "torchaudio", "kaldi_native_fbank", "tensorboard",
                     "piper", "kokoro_onnx", "espeakng_loader", "sherpa_onnx", "librosa", "scipy", "pandas",
                     "matplotlib", "lilcom", "sklearn")

#: rough seconds each stage after training needs on a GPU machine (skipped when less is left)
STAGE_RESERVE_S = {"checkpoint": 25.0, "decode": 25.0, "onnx": 60.0, "oom_scan": 45.0, "ddp": 60.0}

STAGES = ("train", "checkpoint", "decode", "onnx", "oom_scan", "ddp")


class _Hiding(importlib.abc.MetaPathFinder):
    """A meta path finder that finds what ``inner`` finds except the :data:`FORBIDDEN_IMPORTS`,
    which it does not see: with every finder wrapped, those packages look absent (an import of
    one fails, ``importlib.util.find_spec`` gives None), as on the GPU machine."""

    def __init__(self, inner, refused: List[str]) -> None:
        self.inner, self.refused = inner, refused

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in FORBIDDEN_IMPORTS:
            if name not in self.refused:
                self.refused.append(name)
            return None
        find = getattr(self.inner, "find_spec", None)
        return find(name, path, target) if find is not None else None

    def invalidate_caches(self) -> None:
        if hasattr(self.inner, "invalidate_caches"):
            self.inner.invalidate_caches()

    def __getattr__(self, attr):  # find_distributions and the like
        return getattr(self.inner, attr)


#: the names looked for and not found (shared by every wrapped finder)
REFUSED: List[str] = []


def hide_forbidden_imports() -> List[str]:
    """Wrap every finder of ``sys.meta_path`` in :class:`_Hiding` (once); returns the list the
    refused names go into."""
    sys.meta_path[:] = [f if isinstance(f, _Hiding) else _Hiding(f, REFUSED) for f in sys.meta_path]
    for name in list(sys.modules):
        if name.partition(".")[0] in FORBIDDEN_IMPORTS:
            REFUSED.append(f"{name} (already imported)")
    return REFUSED


def third_party_modules() -> List[str]:
    """Top-level modules loaded from site-packages / dist-packages (or from outside the standard
    library and this project)."""
    found = set()
    for name, mod in list(sys.modules.items()):
        top = name.partition(".")[0]
        if top in found or top in getattr(sys, "stdlib_module_names", ()) or top.startswith("_"):
            continue
        f = getattr(mod, "__file__", None) or ""
        if "site-packages" in f or "dist-packages" in f:
            if not f.startswith(str(ROOT / "zipformer_pc")):
                found.add(top)
    return sorted(found - {"zipformer_pc"})


# ---------------------------------------------------------------- options


def get_parser() -> argparse.ArgumentParser:
    from zipformer_pc.layout import DEFAULT_CHUNK_SIZE, DEFAULT_LEFT_CONTEXT_FRAMES

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="auto", help="auto (cuda when available), cuda, cuda:N or cpu")
    p.add_argument("--tiny", action="store_true",
                   help="The CPU smoke settings: tiny encoder, durations x0.15, a few small steps, small scan")
    p.add_argument("--encoder", default=None, help="Encoder preset [paper; tiny with --tiny]")
    p.add_argument("--model-types", default="conditioned,two-decoder")
    p.add_argument("--dtypes", default=None, help="Comma list of train.py --dtype values [fp16,bf16 on CUDA; "
                                                  "fp32,bf16 on a CPU]")
    p.add_argument("--steps", type=int, default=None, help="Timed training steps per model and dtype [300; tiny 2]")
    p.add_argument("--repeat-steps", type=int, default=None, help="Steps on the repeated batch [20; tiny 4]")
    p.add_argument("--sync-steps", type=int, default=None, help="Steps whose host syncs are counted [2; tiny 1]")
    p.add_argument("--warmup-steps", type=int, default=None, help="First timed steps left out of the figures "
                                                                  "[3; tiny 0]")
    p.add_argument("--max-duration", type=float, default=None, help="Seconds of audio per batch [1000; tiny 5]")
    p.add_argument("--repeat-max-duration", type=float, default=None,
                   help="Seconds of audio of the repeated batch [300; tiny 4]")
    p.add_argument("--duration-scale", type=float, default=None,
                   help="Utterance durations times this [1; tiny 0.15]")
    p.add_argument("--vocab-size", type=int, default=500)
    p.add_argument("--tokens-per-second", type=float, default=2.5)
    p.add_argument("--oom-scan", default=None, help="Batch sizes (max-duration) to try [1000,1500,2000,3000; "
                                                    "tiny 4,8]; '' skips the scan")
    p.add_argument("--ddp", default="auto", choices=("auto", "nccl", "gloo", "none"),
                   help="DDP backend: auto is nccl on a GPU, gloo on a CPU")
    p.add_argument("--ddp-world-sizes", default="1,2")
    p.add_argument("--ddp-steps", type=int, default=None, help="Training steps in each DDP process [3; tiny 2]")
    p.add_argument("--ddp-max-duration", type=float, default=None,
                   help="Seconds of audio per DDP batch [200; tiny 3]")
    p.add_argument("--ddp-timeout", type=float, default=None, help="Seconds a DDP run may take [120; tiny 240]")
    p.add_argument("--decode-utts", type=int, default=4)
    p.add_argument("--beam-size", type=int, default=4)
    p.add_argument("--chunk-size", type=int, default=DEFAULT_CHUNK_SIZE,
                   help="Decoding and export chunk (50 Hz frames)")
    p.add_argument("--left-context-frames", type=int, default=DEFAULT_LEFT_CONTEXT_FRAMES)
    p.add_argument("--stages", default=",".join(STAGES), help=f"Comma list of {', '.join(STAGES)}")
    p.add_argument("--time-budget", type=float, default=420.0,
                   help="Seconds for all stages; a stage that no longer fits is skipped, training stops at its "
                        "share (--train-share) [420: under 8 minutes with start-up]")
    p.add_argument("--train-share", type=float, default=0.45, help="Share of the budget the training stage gets")
    p.add_argument("--num-threads", type=int, default=None, help="torch CPU threads [1 on a CPU; 8 on a GPU machine]")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--work-dir", default=None, help="Checkpoints and ONNX files go here [a temporary directory]")
    p.add_argument("--out-json", default=None, help="Write the results here")
    # internal: the processes the check starts
    p.add_argument("--ddp-worker", default=None, help=argparse.SUPPRESS)
    p.add_argument("--cpu-load-worker", default=None, help=argparse.SUPPRESS)
    return p


def settle_options(args) -> None:
    """Fill the options left at None: the GPU defaults, or the CPU smoke ones with ``--tiny``."""
    import torch

    if args.device == "auto":
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    tiny = args.tiny
    defaults = dict(encoder="tiny" if tiny else "paper", steps=2 if tiny else 300, repeat_steps=4 if tiny else 20,
                    sync_steps=1 if tiny else 2, warmup_steps=0 if tiny else 3,
                    max_duration=5.0 if tiny else 1000.0, repeat_max_duration=4.0 if tiny else 300.0,
                    duration_scale=0.15 if tiny else 1.0, oom_scan="4,8" if tiny else "1000,1500,2000,3000",
                    ddp_steps=2 if tiny else 3, ddp_max_duration=3.0 if tiny else 200.0,
                    ddp_timeout=240.0 if tiny else 120.0)
    for k, v in defaults.items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    if args.dtypes is None:
        args.dtypes = "fp16,bf16" if args.device.startswith("cuda") else "fp32,bf16"
    if args.num_threads is None:
        args.num_threads = 8 if args.device.startswith("cuda") else 1


# ---------------------------------------------------------------- data


def librispeech_durations(rng: np.random.Generator, n: int) -> np.ndarray:
    """Utterance durations (s) like LibriSpeech's training set: 7 in 10 between 12 and 17 s (its
    segmentation's usual length), the rest spread over 2..12 s; mean about 12.6 s."""
    long = rng.uniform(12.0, 17.0, n)
    short = 2.0 + 10.0 * rng.beta(2.0, 1.2, n)
    return np.where(rng.random(n) < 0.7, long, short)


class LibriSpeechLike:
    """Generated training batches shaped like LibriSpeech's: durations bucketed as the
    training sampler buckets them (``--num-buckets``), packed up to a max-duration; features
    made on the device; N and P token ids."""

    def __init__(self, seed: int, vocab_size: int, tokens_per_second: float, duration_scale: float = 1.0,
                 num_buckets: int = 10, pool: int = 4000) -> None:
        self.rng = np.random.default_rng(seed)
        self.seed = seed
        self.vocab_size = vocab_size
        self.tokens_per_second = tokens_per_second
        durations = np.sort(librispeech_durations(self.rng, pool) * duration_scale)
        self.durations = np.maximum(durations, 0.5)
        self.buckets = np.array_split(self.durations, num_buckets)
        self.count = 0

    def batch(self, max_duration: float, device, bucket: Optional[int] = None) -> Dict[str, Any]:
        import torch

        rng = self.rng
        b = int(rng.integers(len(self.buckets))) if bucket is None else bucket
        pool = self.buckets[b]
        durs: List[float] = []
        while True:
            d = float(pool[int(rng.integers(len(pool)))])
            if durs and sum(durs) + d > max_duration:
                break
            durs.append(d)
            if sum(durs) >= max_duration:
                break
        frames = [int(round(d * 100)) for d in durs]
        n, t = len(frames), max(frames)
        g = torch.Generator(device=device).manual_seed(self.seed * 1000 + self.count)
        self.count += 1
        # fbank-like: a falling spectral envelope per utterance plus frame-to-frame variation
        envelope = torch.linspace(-4.0, -9.0, 80, device=device) + torch.randn(n, 1, 80, generator=g, device=device)
        feats = envelope + 2.0 * torch.randn(n, t, 80, generator=g, device=device)
        tokens_n, tokens_p = [], []
        for d in durs:
            u = max(1, int(round(d * self.tokens_per_second * rng.uniform(0.8, 1.2))))
            ids = rng.integers(1, self.vocab_size, u)
            tokens_n.append(ids.tolist())
            p = ids.copy()
            cased = rng.random(u) < 0.2  # other pieces where case differs
            p[cased] = rng.integers(1, self.vocab_size, int(cased.sum()))
            marks = rng.integers(1, self.vocab_size, max(1, int(round(u * 0.12))))
            tokens_p.append(np.insert(p, np.sort(rng.integers(0, u + 1, len(marks))), marks).tolist())
        return {"features": feats, "feature_lens": torch.tensor(frames), "tokens_n": tokens_n, "tokens_p": tokens_p,
                "texts_p": [None] * n, "cut_ids": [f"gen-{self.count}-{i}" for i in range(n)],
                "durations": durs}

    def longest(self, max_duration: float, device) -> Dict[str, Any]:
        return self.batch(max_duration, device, bucket=len(self.buckets) - 1)


# ---------------------------------------------------------------- the training objects


def training_args(encoder: str, model_type: str, dtype: str, work_dir: Path):
    """train.py's options for this run: its parser and its defaults for ``encoder``."""
    from zipformer_pc.training.train import apply_training_defaults, get_parser as train_parser, resolve_dtype

    args = train_parser().parse_args([
        "--train-cuts", "generated", "--valid-cuts", "generated", "--bpe-model", "generated",
        "--exp-dir", str(work_dir), "--encoder", encoder, "--model-type", model_type, "--dtype", dtype,
        "--tensorboard", "false"])
    args.defaults_filled = apply_training_defaults(args)
    resolve_dtype(args)
    return args


def make_trainer(args, device, vocab_size: int, world_size: int = 1, rank: int = 0, seed: int = 42):
    """A fresh model, optimizer, schedule, scaler and running average on ``device``, as train.py's
    ``run`` makes them, in train.py's ``Trainer``."""
    import torch

    from zipformer_pc.model.loss import LossConfig, resolve_backend
    from zipformer_pc.training.checkpoint import RunningAverage
    from zipformer_pc.training.optim import Eden, make_optimizer
    from zipformer_pc.training.train import Trainer, fix_random_seed, get_model, make_grad_scaler

    fix_random_seed(seed + rank)
    backend = resolve_backend(args.loss)
    model, model_config = get_model(args, None, vocab_size, backend == "pruned")
    model.to(device)
    model_avg = RunningAverage(model, args.average_period) if rank == 0 else None
    ddp_model = model
    if world_size > 1 or torch.distributed.is_initialized():
        ddp_model = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None, find_unused_parameters=True)
    optimizer = make_optimizer(args.optimizer, [p for p in model.parameters() if p.requires_grad], lr=args.base_lr)
    scheduler = Eden(optimizer, args.lr_batches, args.lr_epochs, warmup_batches=args.warmup_batches)
    loss_cfg = LossConfig(backend=backend, prune_range=args.prune_range, am_scale=args.am_scale,
                          lm_scale=args.lm_scale, simple_loss_scale=args.simple_loss_scale, warm_step=args.warm_step)
    tr = Trainer(args=args, rank=rank, world_size=world_size, device=device, exp_dir=Path(args.exp_dir), model=model,
                 ddp_model=ddp_model, model_config=model_config, model_avg=model_avg, optimizer=optimizer,
                 scheduler=scheduler, scaler=make_grad_scaler(args.dtype, device), loss_cfg=loss_cfg,
                 train_dl=None, valid_dl=None)
    tr.ddp_model.train()
    return tr, backend


def wait(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def is_oom(e: BaseException) -> bool:
    import torch

    return isinstance(e, torch.cuda.OutOfMemoryError) or (
        isinstance(e, RuntimeError) and ("out of memory" in str(e).lower() or "can't allocate memory" in str(e)))


def free_memory(device) -> None:
    import torch

    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def percentiles(times: List[float]) -> Dict[str, Optional[float]]:
    if not times:
        return {"p50": None, "p90": None, "max": None}
    a = np.asarray(times)
    return {"p50": round(float(np.percentile(a, 50)), 4), "p90": round(float(np.percentile(a, 90)), 4),
            "max": round(float(a.max()), 4)}


def count_host_syncs(tr, batches: List[Dict[str, Any]], first_b: int) -> Dict[str, Any]:
    """Host-device synchronisations of ``len(batches)`` training steps: on CUDA the calls torch's
    sync debug mode warns about (and where they come from) and the profiler's counts; on a
    CPU the profiler's ``aten::_local_scalar_dense`` count only (a proxy)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    device, steps = tr.device, len(batches)
    res: Dict[str, Any] = {"steps": steps}
    b = first_b
    ran = 0
    if device.type == "cuda":
        wait(device)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            try:
                for batch in batches:
                    tr.train_batch(batch, b)
                    b += 1
                    ran += 1
            finally:
                torch.cuda.set_sync_debug_mode("default")
        syncs = [w for w in caught if "synchroniz" in str(w.message).lower()]
        sites = Counter()
        for w in syncs:
            f = Path(w.filename)
            try:
                f = f.resolve().relative_to(ROOT)
            except ValueError:
                f = Path(*f.parts[-3:])
            sites[f"{f}:{w.lineno}"] += 1
        res["sync_debug_warnings_per_step"] = round(len(syncs) / steps, 2)
        res["sync_sites"] = {k: round(v / steps, 2) for k, v in sites.most_common(25)}
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    profiled = batches[:1]  # one step: a profile of a large model's step is slow to read
    with profile(activities=activities) as prof:
        for batch in profiled:
            tr.train_batch(batch, b)
            b += 1
            ran += 1
        wait(device)
    res["steps_run"] = ran
    names = Counter(e.name for e in prof.events())
    counted = ("aten::_local_scalar_dense", "cudaStreamSynchronize", "cudaDeviceSynchronize",
               "cudaEventSynchronize", "cudaMemcpy")
    res["profiler_per_step"] = {k: round(names.get(k, 0) / len(profiled), 2) for k in counted
                                if device.type == "cuda" or k.startswith("aten::")}
    if device.type == "cuda":
        res["per_step"] = res["sync_debug_warnings_per_step"]
        res["method"] = "torch.cuda.set_sync_debug_mode('warn') warnings per step (+ profiler counts)"
    else:
        res["per_step"] = res["profiler_per_step"]["aten::_local_scalar_dense"]
        res["method"] = ("profiler count of aten::_local_scalar_dense per step: on a CPU a proxy (tensor reads on "
                         "the host, CPU tensors included; .tolist() and copies not counted)")
    return res


# ---------------------------------------------------------------- the stages


class Check:
    """The run: options, device, data, deadline, and the results as they come."""

    def __init__(self, args) -> None:
        import torch

        self.args = args
        self.t0 = time.monotonic()
        self.device = torch.device(args.device)
        if self.device.type == "cuda" and self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device())
        self.work = Path(args.work_dir) if args.work_dir else Path(tempfile.mkdtemp(prefix="gpu_check_"))
        self.work.mkdir(parents=True, exist_ok=True)
        self.data = LibriSpeechLike(args.seed, args.vocab_size, args.tokens_per_second, args.duration_scale)
        self.results: Dict[str, Any] = {"schema": 1, "skipped": []}
        self.models: Dict[str, Any] = {}  # model type -> its trained model (last dtype), waiting on the CPU
        self.written: Optional[Dict[str, Any]] = None  # the checkpoint written after training
        self.stages = [x.strip() for x in args.stages.split(",") if x.strip()]

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def left(self) -> float:
        return self.args.time_budget - self.elapsed()

    def reserve(self, stage: str) -> float:
        """Seconds ``stage`` is expected to need (a fifth of the GPU figure on a CPU, tiny)."""
        return STAGE_RESERVE_S.get(stage, 0.0) * (0.2 if self.device.type == "cpu" else 1.0)

    def fits(self, stage: str) -> bool:
        reserve = self.reserve(stage)
        if self.left() < reserve:
            self.results["skipped"].append(f"{stage}: time budget ({self.left():.0f} s left, needs ~{reserve:.0f})")
            return False
        return True

    def stage(self, name: str, fn: Callable[[], Any]) -> None:
        t = time.monotonic()
        try:
            out = fn()
        except Exception as e:  # noqa: BLE001 - reported, and the next stage runs
            out = {"ok": False, "error": f"{type(e).__name__}: {e}"[:2000], "traceback": traceback.format_exc()[-4000:]}
            logging.error(f"stage {name} failed: {out['error']}")
        if isinstance(out, dict):
            out.setdefault("seconds", round(time.monotonic() - t, 1))
        self.results[name] = out

    # -- 1. training

    def train(self) -> List[Dict[str, Any]]:
        a = self.args
        combos = [(mt, dt) for mt in a.model_types.split(",") for dt in a.dtypes.split(",")]
        out = []
        share = a.time_budget * a.train_share
        for i, (mt, dt) in enumerate(combos):
            # what is left of the training share, split over the runs still to come
            deadline = self.elapsed() + max(0.0, (share - self.elapsed()) / (len(combos) - i))
            t = time.monotonic()
            tr = None
            try:
                res, tr = self.train_one(mt, dt, deadline)
            except Exception as e:  # noqa: BLE001
                res = {"model_type": mt, "dtype": dt, "ok": False, "error": f"{type(e).__name__}: {e}"[:2000],
                       "traceback": traceback.format_exc()[-4000:]}
                logging.error(f"training {mt} {dt} failed: {res['error']}")
            if tr is not None:
                last_of_type = i + 1 == len(combos) or combos[i + 1][0] != mt
                if (last_of_type and self.written is None and "checkpoint" in self.stages
                        and self.left() > self.reserve("checkpoint")):
                    try:
                        self.write_checkpoint(mt, tr)
                    except Exception as e:  # noqa: BLE001
                        self.written = {"ok": False, "error": f"writing: {type(e).__name__}: {e}"[:2000],
                                        "traceback": traceback.format_exc()[-4000:]}
                if last_of_type:
                    # the model waits on the CPU (its optimizer state goes): the next runs' peak memory is theirs
                    self.models[mt] = tr.model.cpu().eval()
            del tr
            free_memory(self.device)
            res["seconds"] = round(time.monotonic() - t, 1)
            out.append(res)
            logging.info(f"train {mt} {dt}: {json.dumps({k: v for k, v in res.items() if k != 'traceback'})}")
        return out

    def train_one(self, model_type: str, dtype: str, deadline: float):
        """One model type at one dtype; returns its figures and its Trainer."""
        import torch

        from zipformer_pc.model.zipformer import count_parameters
        from zipformer_pc.training.train import autocast_dtype

        a, device = self.args, self.device
        args = training_args(a.encoder, model_type, dtype, self.work / f"exp-{model_type}-{dtype}")
        tr, backend = make_trainer(args, device, a.vocab_size, seed=a.seed)
        # the same batches for every model type and dtype
        data = LibriSpeechLike(a.seed, a.vocab_size, a.tokens_per_second, a.duration_scale)
        amp = autocast_dtype(dtype, device)
        res: Dict[str, Any] = {
            "model_type": model_type, "dtype": dtype, "encoder": a.encoder, "parameters": count_parameters(tr.model),
            "loss_backend": backend, "autocast_dtype": str(amp).replace("torch.", "") if amp else None,
            "grad_scaler": tr.scaler.is_enabled()}
        statuses: Counter = Counter()

        # the repeated batch: the same batch number (the same loss weights and learning rate) each time
        rep = data.batch(a.repeat_max_duration, device)
        losses, out, batch = [], None, None
        for _ in range(a.repeat_steps):
            if self.elapsed() > deadline and len(losses) >= 2:
                break
            out, status = tr.train_batch(rep, 1)
            statuses[status] += 1
            losses.append(out["loss"].detach())
        rep_losses = [round(x, 3) for x in torch.stack(losses).tolist()]
        half = max(1, len(rep_losses) // 2)
        res["repeated_batch"] = {
            "steps": len(rep_losses), "utterances": len(rep["durations"]),
            "audio_seconds": round(sum(rep["durations"]), 1), "losses": rep_losses,
            "falls": len(rep_losses) >= 2 and float(np.mean(rep_losses[-half:])) < float(np.mean(rep_losses[:half]))}
        del rep, out

        # fresh batches: speed and memory
        if device.type == "cuda":
            wait(device)
            torch.cuda.reset_peak_memory_stats(device)
        times, audio, utts, step_losses = [], [], [], []
        b = 1
        stopped = False
        for i in range(a.steps):
            if self.elapsed() > deadline and i >= 1:
                stopped = True
                break
            batch = data.batch(a.max_duration, device)
            wait(device)
            t = time.perf_counter()
            out, status = tr.train_batch(batch, b)
            wait(device)
            times.append(time.perf_counter() - t)
            statuses[status] += 1
            audio.append(sum(batch["durations"]))
            utts.append(len(batch["durations"]))
            step_losses.append(out["loss"].detach())
            b += 1
        del out, batch
        skip = a.warmup_steps if len(times) > a.warmup_steps else 0
        timed = times[skip:]
        res.update({
            "steps": len(times), "timed_steps": len(timed), "stopped_by_budget": stopped,
            "audio_seconds_per_second": round(sum(audio[skip:]) / max(sum(timed), 1e-9), 1) if timed else None,
            "step_time_s": {**percentiles(timed), "first": round(times[0], 3) if times else None},
            "batch": {"utterances_mean": round(float(np.mean(utts)), 1) if utts else None,
                      "audio_seconds_mean": round(float(np.mean(audio)), 1) if audio else None},
        })
        if device.type == "cuda":
            res["peak_memory_gb"] = round(torch.cuda.max_memory_allocated(device) / 2**30, 2)
            res["peak_reserved_gb"] = round(torch.cuda.max_memory_reserved(device) / 2**30, 2)
        step_losses = torch.stack(step_losses).tolist() if step_losses else []
        k = max(1, min(5, len(step_losses) // 2))
        res["loss_start"] = round(float(np.mean(step_losses[:k])), 3) if step_losses else None
        res["loss_end"] = round(float(np.mean(step_losses[-k:])), 3) if step_losses else None

        # host syncs of a few more steps
        if a.sync_steps > 0:
            res["host_syncs"] = count_host_syncs(tr, [data.batch(a.max_duration, device)
                                                      for _ in range(a.sync_steps)], b)

        # non-finite: a skipped step's loss (train.py skips those), or weights after all the steps
        res["nonfinite_steps"] = statuses["nonfinite"]
        res["skipped_no_reference"] = statuses["no_reference"]
        res["weights_finite"] = bool(torch.stack([torch.isfinite(p).all() for p in tr.model.parameters()]).all())
        if tr.scaler.is_enabled():
            # the optimizer counts the updates it made; the scaler skips those with inf/NaN gradients
            state = next((tr.optimizer.state[p] for p in tr.model.parameters() if tr.optimizer.state.get(p)), None)
            made = int(state["step"]) if state else 0
            res["scaler_skipped_steps"] = tr.counters["optimizer_steps"] - made
            res["final_grad_scale"] = tr.scaler.get_scale()
        res["ok"] = res["nonfinite_steps"] == 0 and res["weights_finite"] and res["repeated_batch"]["falls"]
        return res, tr

    # -- 2. checkpoint

    def write_checkpoint(self, model_type: str, tr) -> None:
        """Right after training, from the weights on the device: a checkpoint as train.py writes it,
        and the device's encoder output (float32, eval mode) on a fixed input to compare with."""
        import torch

        from zipformer_pc.model.zipformer import add_tail_silence
        from zipformer_pc.training.checkpoint import save_checkpoint

        exp = self.work / "checkpoint"
        t = time.perf_counter()
        save_checkpoint(exp / "epoch-1.pt", tr.state(1, with_sampler=False))
        g = torch.Generator().manual_seed(self.args.seed)
        feats = torch.randn(2, 300, 80, generator=g) - 6.0
        lens = torch.tensor([300, 220])
        torch.save({"features": feats, "feature_lens": lens}, exp / "input.pt")
        model = tr.model
        model.eval()
        with torch.no_grad():
            x, xl = add_tail_silence(feats.to(self.device), lens.to(self.device), self.args.chunk_size)
            ref, _ = model.encoder(x, xl, chunk_size=self.args.chunk_size,
                                   left_context_frames=self.args.left_context_frames)
        model.train()
        torch.save(ref.float().cpu(), exp / "reference.pt")
        self.written = {"model_type": model_type, "path": str(exp / "epoch-1.pt"),
                        "file_mb": round((exp / "epoch-1.pt").stat().st_size / 1e6, 1),
                        "written_from": str(next(model.parameters()).device),
                        "write_seconds": round(time.perf_counter() - t, 1)}

    def checkpoint(self) -> Dict[str, Any]:
        """The checkpoint written from the device, loaded by a process that sees no GPU."""
        if self.written is None:
            return {"ok": False, "error": "no checkpoint was written (training failed)"}
        res = dict(self.written)
        if "error" in res:
            return res
        exp = Path(res["path"]).parent
        env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": os.pathsep.join(
            [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])}
        cmd = [sys.executable, str(Path(__file__).resolve()), "--cpu-load-worker", str(exp),
               "--chunk-size", str(self.args.chunk_size), "--left-context-frames", str(self.args.left_context_frames)]
        r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=max(60.0, self.left()))
        try:
            res.update(json.loads(r.stdout.strip().splitlines()[-1]))
        except (IndexError, json.JSONDecodeError):
            res.update({"ok": False, "error": f"the CPU process failed (exit {r.returncode}): {r.stderr[-1500:]}"})
        return res

    # -- 3. decoding

    def decode(self) -> List[Dict[str, Any]]:
        out = []
        for model_type, model in self.models.items():
            if not self.fits("decode"):
                break
            try:
                out.append(self.decode_one(model_type, model))
            except Exception as e:  # noqa: BLE001
                out.append({"model_type": model_type, "ok": False, "error": f"{type(e).__name__}: {e}"[:2000],
                            "traceback": traceback.format_exc()[-4000:]})
        return out

    def decode_one(self, model_type: str, model) -> Dict[str, Any]:
        import torch

        from zipformer_pc.decoding.beam_search import search
        from zipformer_pc.model.zipformer import add_tail_silence
        from zipformer_pc.modes import MODE_NAMES

        a, device = self.args, self.device
        model.to(device).eval()
        # about --decode-utts utterances (cut to that many)
        batch = self.data.batch(float(self.data.durations.mean()) * a.decode_utts * 1.5, device)
        n = min(a.decode_utts, len(batch["durations"]))
        lens = batch["feature_lens"][:n]
        feats = batch["features"][:n, : int(lens.max())]
        audio = sum(batch["durations"][:n])
        model.eval()
        res: Dict[str, Any] = {"model_type": model_type, "utterances": n, "audio_seconds": round(audio, 1),
                               "chunk_size": a.chunk_size, "left_context_frames": a.left_context_frames}
        try:
            with torch.no_grad():
                wait(device)
                t = time.perf_counter()
                x, xl = add_tail_silence(feats, lens.to(device), a.chunk_size)
                enc, enc_lens = model.encoder(x, xl, chunk_size=a.chunk_size, left_context_frames=a.left_context_frames)
                wait(device)
                res["encoder_seconds"] = round(time.perf_counter() - t, 3)
                t = time.perf_counter()
                stream, stream_lens = streaming_encode(model.encoder, x, xl, a.chunk_size, a.left_context_frames)
                wait(device)
                res["streaming_encoder_seconds"] = round(time.perf_counter() - t, 3)
                same_len = bool(torch.equal(stream_lens.cpu(), enc_lens.cpu()))
                tmax = min(stream.size(1), enc.size(1))
                valid = (torch.arange(tmax, device=device)[None, :] < enc_lens[:, None]).unsqueeze(-1)
                diff = ((stream[:, :tmax] - enc[:, :tmax]).abs() * valid).max() / enc.abs().max().clamp(min=1e-6)
                res["streaming_vs_masked_rel_err"] = float(diff)
                res["streaming_lengths_match"] = same_len
                searches = []
                for mode in model.trained_modes():
                    for method in ("greedy_search", "modified_beam_search"):
                        wait(device)
                        t = time.perf_counter()
                        hyps = search(model, enc, enc_lens, mode, method, beam=a.beam_size)
                        wait(device)
                        dt = time.perf_counter() - t
                        searches.append({"mode": MODE_NAMES[mode], "method": method, "seconds": round(dt, 3),
                                         "rtf": round(dt / audio, 4), "tokens": sum(len(h) for h in hyps),
                                         "hyps": len(hyps)})
                res["searches"] = searches
        finally:
            model.cpu()
            free_memory(device)
        res["ok"] = (same_len and res["streaming_vs_masked_rel_err"] < 1e-2
                     and all(s["hyps"] == n for s in res["searches"]))
        return res

    # -- 4. ONNX

    def onnx(self) -> Dict[str, Any]:
        import torch

        from zipformer_pc.export.onnx_export import export_model
        from zipformer_pc.export.random_model import write_tokens

        model_type, model = next(iter(self.models.items()))
        out_dir = self.work / "onnx"
        out_dir.mkdir(parents=True, exist_ok=True)
        tokens = out_dir / "tokens-src.txt"
        write_tokens(tokens, self.args.vocab_size)
        model = copy.deepcopy(model).cpu().eval()
        modules_before = set(sys.modules)
        t = time.perf_counter()
        with torch.no_grad():
            files = export_model(model, out_dir, tokens, self.args.chunk_size, self.args.left_context_frames)
        import onnxruntime

        return {"model_type": model_type, "ok": True, "seconds_export_and_check": round(time.perf_counter() - t, 1),
                "files": {k: round(v.stat().st_size / 1e6, 2) for k, v in files.items()},
                "onnxruntime": onnxruntime.__version__,
                "onnxruntime_providers": onnxruntime.get_available_providers(),
                "checked_with": "onnxruntime CPU: encoder (2 chunks, batch 1 and 2), decoders, joiners vs PyTorch",
                "modules_imported": sorted({m.partition(".")[0] for m in set(sys.modules) - modules_before})}

    # -- 5. the largest batch

    def oom_scan(self) -> Dict[str, Any]:
        import torch

        a, device = self.args, self.device
        sizes = [float(s) for s in a.oom_scan.split(",") if s.strip()]
        model_type, dtype = a.model_types.split(",")[0], a.dtypes.split(",")[0]
        self.models.clear()  # the trained models' memory back
        free_memory(device)
        args = training_args(a.encoder, model_type, dtype, self.work / "oom")
        tr, _ = make_trainer(args, device, a.vocab_size, seed=a.seed)
        # loss scaling from 1: the first step's update is made (its optimizer state counts), not skipped
        tr.scaler = torch.amp.GradScaler("cuda", init_scale=1.0, enabled=tr.scaler.is_enabled())
        chunks = tr.model.encoder.chunk_sizes
        full = (-1, -1) if -1 in chunks else (max(chunks), -1)
        tr.model.encoder.draw_chunk_config = lambda: full  # the most memory: full attention
        tried, fits = [], None
        for size in sizes:
            if self.left() < 5:
                self.results["skipped"].append(f"oom_scan: max-duration {size:g} and above: time budget")
                break
            batch = self.data.longest(size, device)
            row: Dict[str, Any] = {"max_duration": size, "utterances": len(batch["durations"]),
                                   "audio_seconds": round(sum(batch["durations"]), 1)}
            if device.type == "cuda":
                wait(device)
                torch.cuda.reset_peak_memory_stats(device)
            oom = None
            t = time.perf_counter()
            try:
                tr.train_batch(batch, 1)
                wait(device)
                row["step_seconds"] = round(time.perf_counter() - t, 3)
            except Exception as e:  # noqa: BLE001
                if not is_oom(e):
                    raise
                oom = f"{type(e).__name__}: {str(e)[:300]}"
            del batch
            tr.optimizer.zero_grad(set_to_none=True)
            if device.type == "cuda":
                row["peak_memory_gb"] = round(torch.cuda.max_memory_allocated(device) / 2**30, 2)
            free_memory(device)
            row["fits"] = oom is None
            if oom:
                row["error"] = oom
            tried.append(row)
            if oom:
                break
            fits = size
        del tr
        free_memory(device)
        return {"model_type": model_type, "dtype": dtype, "attention": "full (the largest chunk config)",
                "bucket": "the longest utterances", "tried": tried, "largest_fitting_max_duration": fits,
                "ok": fits is not None}

    # -- 6. DDP

    def ddp(self) -> List[Dict[str, Any]]:
        a = self.args
        backend = a.ddp if a.ddp != "auto" else ("nccl" if self.device.type == "cuda" else "gloo")
        out = []
        for ws in [int(w) for w in a.ddp_world_sizes.split(",") if w.strip()]:
            if self.left() < self.reserve("ddp") / 2:
                self.results["skipped"].append(f"ddp world size {ws}: time budget")
                continue
            res = run_ddp(self, backend, ws)
            # two NCCL ranks on one GPU: reported, not required
            res["required"] = not (backend == "nccl" and ws > 1 and self.gpu_count() < ws)
            out.append(res)
        return out

    def gpu_count(self) -> int:
        import torch

        return torch.cuda.device_count() if self.device.type == "cuda" else 0

    # -- all of it

    def run(self) -> Dict[str, Any]:
        a = self.args
        stages = self.stages
        bad = [s for s in stages if s not in STAGES]
        if bad:
            raise SystemExit(f"--stages: unknown {', '.join(bad)} (known: {', '.join(STAGES)})")
        self.results["environment"] = environment(self.device)
        self.results["config"] = {k: v for k, v in vars(a).items() if not k.endswith("_worker")}
        if "train" in stages:
            self.stage("train", self.train)
        for name in ("checkpoint", "decode", "onnx"):
            if name not in stages:
                continue
            if not self.models:
                self.results["skipped"].append(f"{name}: no trained model")
            elif self.fits(name):
                self.stage(name, getattr(self, name))
        for name in ("oom_scan", "ddp"):
            if name in stages and (name != "oom_scan" or a.oom_scan.strip()) and self.fits(name):
                self.stage(name, getattr(self, name))
        self.models.clear()
        self.results["elapsed_s"] = round(self.elapsed(), 1)
        self.results["time_budget_s"] = a.time_budget
        self.results["ok"] = overall_ok(self.results)
        return self.results


def streaming_encode(encoder, x, x_lens, chunk: int, left: int):
    """The encoder run chunk by chunk with its streaming states on the input's device
    (as zipformer_pc.decoding.decode.streaming_encode, whose module the check does not import)."""
    import torch

    from zipformer_pc.features import SILENCE_LOG_MEL

    n, t = x.size(0), x.size(1)
    shift, need = encoder.chunk_shift_frames(chunk), encoder.chunk_feature_frames(chunk)
    num_chunks = max(1, -(-max(t - (need - shift), 1) // shift))
    x = torch.nn.functional.pad(x, (0, 0, 0, (num_chunks - 1) * shift + need - t), value=SILENCE_LOG_MEL)
    states = encoder.get_init_states(n, chunk, left, device=x.device)
    outs = []
    for c in range(num_chunks):
        piece_lens = (x_lens - c * shift).clamp(min=0, max=need)
        out, _, states = encoder.streaming_forward(x[:, c * shift: c * shift + need], piece_lens, states)
        outs.append(out)
    out_lens = encoder.output_lengths(x_lens)
    return torch.cat(outs, dim=1)[:, : int(out_lens.max())], out_lens


def overall_ok(r: Dict[str, Any]) -> bool:
    oks = []
    for name in STAGES:
        v = r.get(name)
        if v is None:
            continue
        rows = v if isinstance(v, list) else [v]
        oks += [bool(x.get("ok")) for x in rows if isinstance(x, dict) and x.get("required", True)]
    return bool(oks) and all(oks)


def nccl_version() -> Optional[str]:
    import torch

    try:
        v = torch.cuda.nccl.version()
    except Exception:  # noqa: BLE001
        return None
    return ".".join(map(str, v)) if isinstance(v, tuple) else str(v)


def environment(device) -> Dict[str, Any]:
    import torch

    import zipformer_pc

    env: Dict[str, Any] = {
        "project": str(Path(zipformer_pc.__file__).resolve().parent),
        "python": platform.python_version(), "torch": torch.__version__, "numpy": np.__version__,
        "device": str(device), "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads()}
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        env.update({
            "gpu": props.name, "gpu_count": torch.cuda.device_count(), "capability": f"{props.major}.{props.minor}",
            "gpu_memory_gb": round(props.total_memory / 2**30, 1), "cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version(), "bf16_supported": torch.cuda.is_bf16_supported(),
            "nccl": nccl_version()})
    try:
        import k2  # noqa: F401

        env["k2"] = True
    except Exception:  # noqa: BLE001
        env["k2"] = False
    return env


# ---------------------------------------------------------------- the other processes


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ddp(check: Check, backend: str, world_size: int) -> Dict[str, Any]:
    """``world_size`` processes of :func:`ddp_worker`; their results, or why there are none."""
    a = check.args
    port = free_port()
    out_dir = check.work / f"ddp-{backend}-{world_size}"
    out_dir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])}
    procs = []
    for rank in range(world_size):
        spec = {"backend": backend, "rank": rank, "world_size": world_size, "port": port, "device": a.device,
                "encoder": a.encoder, "model_type": a.model_types.split(",")[0], "dtype": a.dtypes.split(",")[0],
                "steps": a.ddp_steps, "max_duration": a.ddp_max_duration, "vocab_size": a.vocab_size,
                "tokens_per_second": a.tokens_per_second, "duration_scale": a.duration_scale, "seed": a.seed,
                "num_threads": a.num_threads, "out": str(out_dir / f"rank{rank}.json"), "work": str(out_dir),
                "timeout": a.ddp_timeout}
        log = open(out_dir / f"rank{rank}.log", "w")
        procs.append((subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--ddp-worker",
                                        json.dumps(spec)], stdout=log, stderr=subprocess.STDOUT, env=env), log))
    t = time.monotonic()
    limit = min(a.ddp_timeout, max(10.0, check.left()))
    timed_out = False
    while any(p.poll() is None for p, _ in procs):
        if time.monotonic() - t > limit:
            timed_out = True
            break
        if any(p.poll() not in (None, 0) for p, _ in procs) and time.monotonic() - t > 5:
            # a rank failed: give the others a few seconds to fail too, then stop them
            time.sleep(5)
            break
        time.sleep(0.2)
    for p, log in procs:
        if p.poll() is None:
            p.kill()
            p.wait()
        log.close()
    res: Dict[str, Any] = {"backend": backend, "world_size": world_size, "seconds": round(time.monotonic() - t, 1),
                           "timed_out": timed_out, "exit_codes": [p.returncode for p, _ in procs]}
    ranks = []
    for rank in range(world_size):
        f = out_dir / f"rank{rank}.json"
        ranks.append(json.loads(f.read_text()) if f.is_file() else None)
    res["ranks"] = ranks
    ok = all(r is not None and r.get("ok") for r in ranks) and not timed_out
    res["ok"] = ok
    if not ok:
        tails = []
        for rank in range(world_size):
            text = (out_dir / f"rank{rank}.log").read_text(errors="replace")
            tails.append(f"rank {rank}: " + "\n".join(text.strip().splitlines()[-12:]))
        res["error"] = "\n".join(tails)[-3000:]
    return res


def ddp_worker(spec: Dict[str, Any]) -> None:
    """One rank: a few DDP training steps with train.py's step, then the validation reduction and the
    float64 broadcast train.py makes, and whether the ranks' weights agree."""
    import datetime

    import torch
    import torch.distributed as dist

    from zipformer_pc.training.train import compute_validation_loss

    torch.set_num_threads(spec["num_threads"])
    rank, ws = spec["rank"], spec["world_size"]
    res: Dict[str, Any] = {"rank": rank, "ok": False}
    try:
        if spec["device"].startswith("cuda"):
            device = torch.device("cuda", rank % torch.cuda.device_count())
            torch.cuda.set_device(device)
        else:
            device = torch.device("cpu")
        res["device"] = str(device)
        dist.init_process_group(spec["backend"], init_method=f"tcp://127.0.0.1:{spec['port']}", rank=rank,
                                world_size=ws, timeout=datetime.timedelta(seconds=spec["timeout"]))
        args = training_args(spec["encoder"], spec["model_type"], spec["dtype"], Path(spec["work"]) / f"exp{rank}")
        tr, _ = make_trainer(args, device, spec["vocab_size"], world_size=ws, rank=rank, seed=spec["seed"])
        data = LibriSpeechLike(spec["seed"] + 17 * rank, spec["vocab_size"], spec["tokens_per_second"],
                               spec["duration_scale"])
        times, statuses = [], Counter()
        for b in range(1, spec["steps"] + 1):
            batch = data.batch(spec["max_duration"], device)
            wait(device)
            t = time.perf_counter()
            _, status = tr.train_batch(batch, b)
            wait(device)
            times.append(round(time.perf_counter() - t, 3))
            statuses[status] += 1
        res["step_seconds"] = times
        res["statuses"] = dict(statuses)
        valid = compute_validation_loss(tr.ddp_model, [data.batch(spec["max_duration"], device)], args, tr.loss_cfg,
                                        device)
        res["valid"] = {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in valid.items()}
        t = torch.tensor([1.0, 0.0, 2.5], device=device, dtype=torch.float64)
        dist.broadcast(t, src=0)  # train.py's time decisions
        checksum = torch.stack([p.detach().double().sum() for p in tr.model.parameters()]).sum().reshape(1)
        sums = [torch.zeros_like(checksum) for _ in range(ws)]
        dist.all_gather(sums, checksum)
        res["weights_equal_across_ranks"] = len({float(s) for s in sums}) == 1
        res["ok"] = res["weights_equal_across_ranks"] and statuses.get("stepped", 0) == spec["steps"]
        dist.barrier()
        dist.destroy_process_group()
    except Exception as e:  # noqa: BLE001
        res["error"] = f"{type(e).__name__}: {e}"[:2000]
        res["traceback"] = traceback.format_exc()[-3000:]
    Path(spec["out"]).write_text(json.dumps(res) + "\n")
    if not res["ok"]:
        sys.exit(1)


def cpu_load_worker(exp_dir: str, chunk: int, left: int) -> None:
    """In a process that sees no GPU: the checkpoint through the loader decoding and export use
    (its running average and its last weights), the encoder output compared with the GPU's."""
    import torch

    from zipformer_pc.model.zipformer import add_tail_silence
    from zipformer_pc.training.checkpoint import load_model_for_inference

    res: Dict[str, Any] = {"cuda_visible": torch.cuda.is_available()}
    exp = Path(exp_dir)
    model = load_model_for_inference(exp, epoch=1, avg=1, use_averaged_model=False)
    inp = torch.load(exp / "input.pt")
    with torch.no_grad():
        x, xl = add_tail_silence(inp["features"], inp["feature_lens"], chunk)
        out, _ = model.encoder(x, xl, chunk_size=chunk, left_context_frames=left)
    ref = torch.load(exp / "reference.pt")
    res["encoder_rel_err_vs_device"] = float((out - ref).abs().max() / ref.abs().max().clamp(min=1e-6))
    averaged = load_model_for_inference(exp, epoch=1, avg=1, use_averaged_model=True)
    res["averaged_model_loads"] = True
    res["averaged_desc"] = averaged.averaged
    res["ok"] = not res["cuda_visible"] and res["encoder_rel_err_vs_device"] < 1e-2
    print(json.dumps(res))


# ---------------------------------------------------------------- output


def markdown(r: Dict[str, Any]) -> str:
    env = r.get("environment", {})
    lines = [f"GPU check on {env.get('gpu', env.get('device'))} (torch {env.get('torch')}, CUDA {env.get('cuda')}): "
             f"{'OK' if r.get('ok') else 'NOT OK'} in {r.get('elapsed_s')} s of {r.get('time_budget_s'):g}", ""]
    lines += ["| model | dtype | steps | s audio / s | step p50 / p90 / max (s) | peak GB | repeated-batch loss "
              "| falls | non-finite | scaler skips | host syncs / step |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    train = r.get("train")
    for t in (train if isinstance(train, list) else []):
        if "error" in t:
            lines.append(f"| {t['model_type']} | {t['dtype']} | failed: {t['error'][:120]} |||||||||")
            continue
        st = t["step_time_s"]
        rep = t["repeated_batch"]["losses"]
        syncs = t.get("host_syncs", {}).get("per_step", "-")
        lines.append(
            f"| {t['model_type']} | {t['dtype']} | {t['steps']}{' (budget)' if t['stopped_by_budget'] else ''} "
            f"| {t['audio_seconds_per_second']} | {st['p50']} / {st['p90']} / {st['max']} "
            f"| {t.get('peak_memory_gb', '-')} | {rep[0] if rep else '-'} -> {rep[-1] if rep else '-'} "
            f"| {'yes' if t['repeated_batch']['falls'] else 'NO'} | {t['nonfinite_steps']} "
            f"| {t.get('scaler_skipped_steps', '-')} | {syncs} |")
    lines += ["", "| stage | result |", "|---|---|"]

    def status(v) -> str:
        return "ok" if v.get("ok") else f"FAILED: {str(v.get('error', ''))[:200]}".replace("\n", " ")

    c = r.get("checkpoint")
    if isinstance(c, dict):
        lines.append(f"| checkpoint | {status(c)}: written from {c.get('written_from')}, loaded without a GPU, "
                     f"encoder rel. error {c.get('encoder_rel_err_vs_device', '-')} |")
    dec = r.get("decode")
    for d in (dec if isinstance(dec, list) else [dec] if isinstance(dec, dict) else []):
        line = f"| decode {d.get('model_type', '')} | {status(d)}"
        if "searches" in d:
            line += (f": {d['utterances']} utts, streaming vs masked rel. error "
                     f"{d['streaming_vs_masked_rel_err']:.1e}; "
                     + ", ".join(f"{x['mode']} {x['method'].split('_')[0]} RTF {x['rtf']}" for x in d["searches"]))
        lines.append(line + " |")
    o = r.get("onnx")
    if isinstance(o, dict):
        line = f"| onnx | {status(o)}"
        if o.get("ok"):
            line += f": exported and checked in {o.get('seconds_export_and_check')} s, onnxruntime {o.get('onnxruntime')}"
        lines.append(line + " |")
    s = r.get("oom_scan")
    if isinstance(s, dict):
        line = f"| oom scan | {status(s)}"
        if "tried" in s:
            line += (f": {s['model_type']} {s['dtype']}, largest fitting max-duration "
                     f"{s['largest_fitting_max_duration']}; "
                     + ", ".join(f"{x['max_duration']:g}: {'fits' if x['fits'] else 'OOM'}"
                                 + (f" ({x['peak_memory_gb']} GB)" if "peak_memory_gb" in x else "")
                                 for x in s["tried"]))
        lines.append(line + " |")
    dd = r.get("ddp")
    for d in (dd if isinstance(dd, list) else [dd] if isinstance(dd, dict) else []):
        if "world_size" in d:
            lines.append(f"| ddp {d['backend']} x{d['world_size']} | {status(d)}"
                         f"{'' if d.get('required', True) else ' (not required: one GPU)'} |")
        else:
            lines.append(f"| ddp | {status(d)} |")
    for s in r.get("skipped", []):
        lines.append(f"| skipped | {s} |")
    imp = r.get("imports", {})
    lines.append(f"| imports | third-party: {', '.join(imp.get('third_party', []))}; refused: "
                 f"{', '.join(sorted(set(imp.get('refused', [])))) or 'none'} |")
    return "\n".join(lines)


def main(argv: Optional[List[str]] = None) -> int:
    args = get_parser().parse_args(argv)
    refused = hide_forbidden_imports()
    import torch

    if args.ddp_worker:
        ddp_worker(json.loads(args.ddp_worker))
        return 0
    if args.cpu_load_worker:
        torch.set_num_threads(2)
        cpu_load_worker(args.cpu_load_worker, args.chunk_size, args.left_context_frames)
        return 0
    setup_logging()
    settle_options(args)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit(f"--device {args.device}: CUDA is not available here (--device cpu --tiny: the CPU smoke run)")
    torch.set_num_threads(args.num_threads)
    check = Check(args)
    results = check.run()
    results["imports"] = {"third_party": third_party_modules(), "refused": sorted(set(refused))}
    table = markdown(results)
    print(table)
    if args.out_json:
        Path(args.out_json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out_json).write_text(json.dumps(results, indent=1, default=str) + "\n")
    return 0 if results["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
