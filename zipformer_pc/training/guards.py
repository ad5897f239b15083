"""Guards of a long GPU run, after icefall's train.py: the fp16 loss scale kept
alive (and a run whose scale collapses stopped with a checkpoint to look at),
hooks that name the first module whose output is not finite, and a scan of the
batches most likely to run out of GPU memory before training starts.

Each piece is plain logic over small interfaces (a scaler with ``get_scale``
and ``update``, a sampler that yields CutSets, a step function), so it is
tested on a CPU with fakes (tests/training/test_guards.py); ``train.py`` wires them.
"""

import copy
import logging
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

import torch

# ----------------------------------------------------------------- loss scale

#: (every N batches, re-grow a scale below S): icefall doubles a scale under 8
#: every 100 batches and one under 32 every 400
DEFAULT_GROW_RULES: Tuple[Tuple[int, float], ...] = ((100, 8.0), (400, 32.0))


class GradScaleCollapsed(RuntimeError):
    """The fp16 loss scale fell below the floor: every scale overflows, training cannot go on."""


@dataclass
class GradScaleGuard:
    """What icefall does around torch's GradScaler, on batch numbers ``b`` counted from 1.

    torch's scaler halves its scale at every overflowing step and doubles it only
    after ``growth_interval`` (2000) clean steps in a row, whatever the scale: a
    run that started at a small scale (``--initial-grad-scale 1``: the first
    steps are not thrown away while the scale halves down from 65536), or whose
    scale fell during a bad stretch, would train for thousands of steps with
    gradients that underflow in float16.  So every ``every`` batches a scale
    below ``below`` is doubled (for each rule of ``grow_rules``; one doubling per
    check).  A scale under ``warn_below`` is logged, and the first time it is,
    ``save(suffix)`` writes a checkpoint (``bad-model-first-warning``); a scale
    under ``floor`` means that float16 overflows at any scale: ``save`` writes
    ``bad-model`` and :class:`GradScaleCollapsed` ends the run.

    ``check`` reads the scale from the device (one sync) only on the batches
    where a rule applies.
    """

    scaler: Any
    grow_rules: Sequence[Tuple[int, float]] = DEFAULT_GROW_RULES
    warn_below: float = 0.01
    floor: float = 1e-5
    save: Optional[Callable[[str], Optional[str]]] = None
    warned: bool = False
    grown: int = 0

    def due(self, b: int) -> bool:
        return any(b % every == 0 for every, _ in self.grow_rules)

    def check(self, b: int) -> Optional[float]:
        """After the optimizer step of batch ``b``: the scale read (None when no rule applied)."""
        if not self.scaler.is_enabled() or not self.due(b):
            return None
        scale = float(self.scaler.get_scale())
        if scale < self.floor:
            where = self.save("") if self.save is not None else None
            raise GradScaleCollapsed(
                f"Batch {b}: the fp16 loss scale collapsed to {scale:.3g} (below --grad-scale-floor "
                f"{self.floor:g}): the gradients overflow in float16 at every scale, so the updates are all "
                f"skipped. " + (f"The model is saved in {where}. " if where else "")
                + "Try --inf-check true to name the module that overflows, --dtype bf16 (A100, H100 and later), "
                  "or a lower --base-lr; resume from the last good checkpoint-B.pt with --start-batch B.")
        if scale < self.warn_below:
            logging.warning(f"Batch {b}: the fp16 loss scale is small ({scale:.3g}): the gradients overflow "
                            "in float16 often")
            if not self.warned and self.save is not None:
                where = self.save("-first-warning")
                if where:
                    logging.warning(f"The model at the first warning is saved in {where}")
            self.warned = True
        if any(b % every == 0 and scale < below for every, below in self.grow_rules):
            self.scaler.update(scale * 2.0)
            self.grown += 1
            return scale * 2.0
        return scale


# ----------------------------------------------------------------- inf check

def _tensors(x) -> Iterable[torch.Tensor]:
    if isinstance(x, torch.Tensor):
        yield x
    elif isinstance(x, (list, tuple)):
        for y in x:
            yield from _tensors(y)
    elif isinstance(x, dict):
        for y in x.values():
            yield from _tensors(y)


def _nonfinite(x) -> bool:
    return any(t.is_floating_point() and t.numel() and not bool(torch.isfinite(t).all()) for t in _tensors(x))


def tensor_summary(x) -> str:
    """min / max / mean |x| of the finite values of the floating-point tensors in ``x``, and how many are not."""
    parts = []
    for t in _tensors(x):
        if not t.is_floating_point() or not t.numel():
            continue
        t = t.detach().float()
        ok = torch.isfinite(t)
        good = t[ok]
        stats = (f"min {good.min().item():.3g}, max {good.max().item():.3g}, mean|x| {good.abs().mean().item():.3g}"
                 if good.numel() else "no finite value")
        parts.append(f"{tuple(t.shape)} {stats}, {int((~ok).sum())} non-finite")
    return "; ".join(parts) or "no floating-point tensor"


@dataclass
class InfCheck:
    """``--inf-check true``: forward hooks on every module (and hooks on the
    gradients of their outputs) that report, once per batch, the first module
    whose output, or whose output's gradient, holds an inf or a NaN, with the
    statistics of its inputs and output.  Forward hooks run as each module
    finishes, inner modules before the modules that hold them, so the first
    report names the innermost module where the values went bad.

    Every check reads the device: a debugging option, several times slower.
    """

    batch: int = 0
    reports: List[str] = field(default_factory=list)
    _forward_seen: bool = False
    _backward_seen: bool = False
    handles: List[Any] = field(default_factory=list)

    def new_batch(self, b: int) -> None:
        self.batch, self._forward_seen, self._backward_seen = b, False, False

    def register(self, model: torch.nn.Module) -> "InfCheck":
        for name, module in model.named_modules():
            self.handles.append(module.register_forward_hook(self._forward_hook(name or "(the model)")))
        return self

    def remove(self) -> None:
        for h in self.handles:
            h.remove()
        self.handles.clear()

    def _report(self, msg: str) -> None:
        self.reports.append(msg)
        logging.warning(msg)

    def _forward_hook(self, name: str):
        def hook(module, inputs, output):
            if not self._forward_seen and _nonfinite(output):
                self._forward_seen = True
                self._report(f"Batch {self.batch}: the output of {name} ({type(module).__name__}) is not finite "
                             f"(the first module of this forward): inputs {tensor_summary(inputs)}; output "
                             f"{tensor_summary(output)}")
            if torch.is_grad_enabled():
                for t in _tensors(output):
                    if t.requires_grad and t.is_floating_point():
                        t.register_hook(self._grad_hook(name, module))
        return hook

    def _grad_hook(self, name: str, module):
        def hook(grad):
            # gradients flow from the loss backwards: the first one seen is the module nearest the loss
            if not self._backward_seen and _nonfinite(grad):
                self._backward_seen = True
                self._report(f"Batch {self.batch}: the gradient of the output of {name} ({type(module).__name__}) "
                             f"is not finite (the first in this backward, from the loss): {tensor_summary(grad)}")
        return hook


# ----------------------------------------------------------------- OOM scan

#: what a batch's memory grows with: padded frames (the encoder), padded frames
#: x padded tokens (the simple loss's (N, T, U+1) lattices), cut count x longest
#: tokens (the predictor)
OOM_CRITERIA = ("padded_seconds", "lattice", "padded_tokens")


@dataclass
class BatchShape:
    """The sizes of one batch that its memory follows."""

    count: int  # cuts in the batch
    seconds: float
    longest: float
    max_tokens: int
    batch_index: int
    cuts: List[Any] = field(default_factory=list, repr=False)  # the batch's cuts, to make it again

    @property
    def padded_seconds(self) -> float:
        return self.count * self.longest

    @property
    def padded_tokens(self) -> int:
        return self.count * self.max_tokens

    @property
    def lattice(self) -> float:
        return self.count * self.longest * self.max_tokens

    def describe(self) -> str:
        return (f"batch {self.batch_index} of the epoch: {self.count} cuts, {self.seconds:.0f} s of audio, the "
                f"longest {self.longest:.2f} s ({self.padded_seconds:.0f} s padded), up to {self.max_tokens} tokens")


def pessimistic_batches(sampler, token_count: Callable[[Any], int],
                        criteria: Sequence[str] = OOM_CRITERIA) -> Dict[str, BatchShape]:
    """The batch of one epoch of ``sampler`` that is largest by each criterion of
    :data:`OOM_CRITERIA`.  The sampler is copied (the training sampler's state
    and epoch are untouched; it must not be in the middle of an epoch, whose iterator
    cannot be copied) and yields CutSets; no audio or feature is read.
    ``token_count(cut)``: the tokens of the cut's longest reference."""
    probe = copy.deepcopy(sampler)
    best: Dict[str, BatchShape] = {}
    for i, batch in enumerate(probe):
        batch = list(batch)
        if not batch:
            continue
        shape = BatchShape(count=len(batch), seconds=sum(c.duration for c in batch),
                           longest=max(c.duration for c in batch),
                           max_tokens=max(token_count(c) for c in batch), batch_index=i, cuts=batch)
        for k in criteria:
            if k not in best or getattr(shape, k) > getattr(best[k], k):
                best[k] = shape
    return best


def suggest_max_duration(max_duration: float, failed: BatchShape, fitted: Sequence[Tuple[BatchShape, float]],
                         total_memory: float, headroom: float = 0.85, step: float = 25.0) -> float:
    """A ``--max-duration`` to try after ``failed`` ran out of memory.  Memory is
    taken as growing with the padded seconds of a batch: from the batches that
    fitted, (shape, peak bytes), the most memory per padded second; the failed
    batch scaled to ``headroom`` of ``total_memory`` at that rate.  Without a
    fitted batch: half.  Rounded down to a multiple of ``step`` (at least ``step``)."""
    per_second = max((peak / max(s.padded_seconds, 1e-9) for s, peak in fitted), default=0.0)
    if per_second > 0 and total_memory > 0:
        ratio = headroom * total_memory / (per_second * max(failed.padded_seconds, 1e-9))
        ratio = min(ratio, 0.9)  # it did fail: at least 10% less
    else:
        ratio = 0.5
    return max(step, math.floor(max_duration * ratio / step) * step)


class OomScanFailed(RuntimeError):
    """A pessimistic batch ran out of memory before training started."""


def is_oom_error(e: BaseException) -> bool:
    return isinstance(e, torch.cuda.OutOfMemoryError) or "out of memory" in str(e).lower()


def scan_for_oom(batches: Dict[str, BatchShape], run_step: Callable[[BatchShape], None], max_duration: float,
                 peak_memory: Callable[[], float], reset_peak: Callable[[], None], total_memory: float,
                 free_memory: Callable[[], None] = lambda: None) -> List[Dict[str, Any]]:
    """One forward and backward on each pessimistic batch (``run_step``, which
    must not update the weights).  Returns, per criterion, its batch and the peak
    memory; raises :class:`OomScanFailed` on the first batch that runs out of
    memory, naming it and a smaller ``--max-duration`` to try."""
    done: List[Dict[str, Any]] = []
    fitted: List[Tuple[BatchShape, float]] = []
    tried = {}
    for criterion, shape in batches.items():
        if shape.batch_index in tried:  # the same batch is the worst by several criteria
            done.append({**tried[shape.batch_index], "criterion": criterion})
            continue
        reset_peak()
        try:
            run_step(shape)
        except Exception as e:  # noqa: BLE001 (only out-of-memory errors are handled)
            if not is_oom_error(e):
                raise
            free_memory()
            suggestion = suggest_max_duration(max_duration, shape, fitted, total_memory)
            raise OomScanFailed(
                f"Out of memory on the largest batch by {criterion} ({shape.describe()}) at --max-duration "
                f"{max_duration:g}: try --max-duration {suggestion:g} (or a GPU with more memory; "
                "--scan-oom false skips this scan)") from e
        peak = float(peak_memory())
        fitted.append((shape, peak))
        row = {"criterion": criterion, "batch": shape.describe(), "peak_memory_gb": peak / 2**30}
        tried[shape.batch_index] = row
        done.append(row)
        free_memory()
    return done
