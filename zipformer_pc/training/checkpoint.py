"""Checkpoints of training: atomic saving, resuming, the running average, initialising from another run.

Files in an experiment directory (icefall's layout):

* ``epoch-E.pt``: written at the end of epoch E;
* ``checkpoint-B.pt``: written every ``--save-every-n`` batches (B counts
  training batches over all epochs); only the last ``--keep-last-k`` are kept;
* each holds ``model`` (the weights), ``model_avg`` and ``model_avg_batches``
  (the exact mean of the weights after every training batch ``1..n``,
  :class:`RunningAverage`; on disk a mean equal to the weights is stored once,
  :func:`load_checkpoint` rebuilds it), ``model_config`` (to rebuild the model), the
  optimizer, scheduler, sampler and grad-scaler states, RNG states and the
  training counters (``batch_idx_train``, ``optimizer_steps``, ...).

Reading them back for decoding and export (``--epoch E --avg A``, ``--iter B --avg A``:
:func:`averaged_weights`, :func:`load_model_for_inference`) lives in
:mod:`zipformer_pc.model.loading`, which needs none of the training code; its names are
re-exported here, so older imports keep working.
"""

import logging
import os
from pathlib import Path
from typing import Any, Dict, List

import torch

from zipformer_pc.model.loading import (  # noqa: F401  (re-exported: the inference side)
    AVG_FROM_MODEL,
    _all_checkpoints_kept,
    _avg_batches,
    _check_trained,
    _expand,
    _steps,
    average_between,
    average_state_dicts,
    averaged_weights,
    batch_checkpoints,
    load_checkpoint,
    load_model_for_inference,
)

# The float64 means are two thirds of a checkpoint: one equal to the weights is stored once
# (its name and dtype under this key; a fine-tune with a frozen encoder writes 28 MB instead of 68).
_AVG_FROM_MODEL = AVG_FROM_MODEL


def _compact(state: Dict[str, Any]) -> Dict[str, Any]:
    # the means live on the CPU, the weights on the training device (a GPU's: compared on the CPU)
    model, avg = state.get("model"), state.get("model_avg")
    if not isinstance(model, dict) or not isinstance(avg, dict):
        return state
    same = {k: v.dtype for k, v in avg.items()
            if k in model and model[k].shape == v.shape and torch.equal(model[k].to("cpu", v.dtype), v)}
    if not same:
        return state
    kept = {k: v for k, v in avg.items() if k not in same}
    return {**state, "model_avg": kept, _AVG_FROM_MODEL: {k: str(d).replace("torch.", "") for k, d in same.items()}}


def save_checkpoint(path: Path, state: Dict[str, Any]) -> None:
    """Write ``state`` to ``path`` atomically (a crash never leaves a half-written file)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    torch.save(_compact(state), tmp)
    os.replace(tmp, path)


def remove_old_checkpoints(exp_dir: Path, keep_last_k: int) -> None:
    if keep_last_k <= 0:
        return
    for p in batch_checkpoints(exp_dir)[keep_last_k:]:
        p.unlink(missing_ok=True)


class RunningAverage:
    """The exact mean of the model weights after every training batch so far.

    Each batch adds the current weights to an accumulator (float64 on CPU,
    float32 on a GPU, where the step is cheap); every ``period`` batches, and
    whenever :meth:`state_dict` is called (i.e. at every checkpoint), the
    accumulator is folded into the float64 mean.  ``period`` therefore only
    sets how often the weights are copied off the device: the mean covers
    every batch ``1..batches`` whatever the period, the epoch length or the
    checkpoint interval, so the average between two checkpoints is exact
    (:func:`average_between`).  Batches whose update was skipped count with
    the unchanged weights.  Non-floating tensors take their latest value; weights
    that never moved keep a mean of exactly their value.
    """

    def __init__(self, model: torch.nn.Module, period: int = 1) -> None:
        if period < 1:
            raise ValueError(f"--average-period must be >= 1, got {period}")
        self.period = period
        sd = model.state_dict()
        self.keys = [k for k, v in sd.items() if v.is_floating_point()]
        self.mean = {k: v.detach().to("cpu", torch.float64, copy=True) for k, v in sd.items()}
        self.batches = 0
        self._pending = 0
        self._acc = {k: torch.zeros_like(sd[k], dtype=torch.float64 if sd[k].device.type == "cpu" else torch.float32)
                     for k in self.keys}
        self._model = model

    def step(self) -> None:
        """Account for the weights after one more training batch."""
        with torch.no_grad():
            sd = self._model.state_dict()
            # one multi-tensor kernel for the ~300 tensors (float32 into the float64
            # accumulators): ~3 ms a step on the tiny model where a loop took ~8
            torch._foreach_add_([self._acc[k] for k in self.keys], [sd[k].detach() for k in self.keys])
        self._pending += 1
        if self._pending >= self.period:
            self.fold()

    def fold(self) -> None:
        if self._pending == 0:
            return
        n0, n1 = self.batches, self.batches + self._pending
        sd = self._model.state_dict()
        with torch.no_grad():
            for k, v in sd.items():
                if k in self._acc:
                    acc, cur = self._acc[k].to("cpu", torch.float64), v.detach().to("cpu", torch.float64)
                    # weights that did not move (a frozen module) keep a mean of exactly their value,
                    # which the checkpoint then need not store twice (save_checkpoint)
                    if not (torch.equal(self.mean[k], cur) and torch.equal(acc, cur * self._pending)):
                        self.mean[k].mul_(n0 / n1).add_(acc, alpha=1.0 / n1)
                    self._acc[k].zero_()
                else:
                    self.mean[k].copy_(v.detach().cpu())
        self.batches, self._pending = n1, 0

    def state_dict(self) -> Dict[str, Any]:
        """``{"model_avg": mean weights, "model_avg_batches": batches they cover}`` (folds first)."""
        self.fold()
        return {"model_avg": {k: v.clone() for k, v in self.mean.items()}, "model_avg_batches": self.batches}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Continue from a checkpoint's average (a checkpoint without ``model_avg_batches`` restarts it)."""
        n = state.get("model_avg_batches")
        if n is None or state.get("model_avg") is None:
            logging.warning("The checkpoint has no exact running average (written by an older version): "
                            "the average restarts here; --epoch/--avg intervals must start after this point")
            return
        for k, v in state["model_avg"].items():
            self.mean[k].copy_(v)
        self.batches, self._pending = int(n), 0
        for a in self._acc.values():
            a.zero_()


def _head_map(src_keys: List[str], dst_keys: List[str], group: str) -> Dict[str, str]:
    """Target head name -> source head name for a head ``group`` (``decoders``, ``joiners``, ...).

    Same names map to themselves; when the source has a single head, every
    target head without a same-named source head starts from it (a ``norm``
    or ``conditioned`` model's ``main`` head seeds both heads of a
    ``two-decoder`` model).
    """
    def heads(keys: List[str]) -> List[str]:
        return sorted({k.split(".")[1] for k in keys if k.startswith(group + ".")})

    src, dst = heads(src_keys), heads(dst_keys)
    out = {}
    for name in dst:
        if name in src:
            out[name] = name
        elif len(src) == 1:
            out[name] = src[0]
    return out


def _is_narrower_token_embedding(name: str, src: torch.Tensor, dst: torch.Tensor) -> bool:
    return (name.startswith("decoders.") and name.endswith(".embedding.weight") and src.dim() == dst.dim() == 2
            and src.size(0) == dst.size(0) and src.size(1) > dst.size(1))


def _is_shorter_predictor_conv(name: str, src: torch.Tensor, dst: torch.Tensor) -> bool:
    return (name.startswith("decoders.") and name.endswith(".conv.weight") and src.dim() == dst.dim() == 3
            and src.shape[:2] == dst.shape[:2] and src.size(2) < dst.size(2))


INIT_MODULES = ("encoder", "decoders", "joiners", "simple_am_proj", "simple_lm_proj", "ctc_output",
                "sentence_end_output")
#: module groups with one copy per model (the others have one per head and are matched by name)
_SHARED_MODULES = ("encoder", "ctc_output", "sentence_end_output")


def init_from_checkpoint(model: torch.nn.Module, path: Path, modules: List[str]) -> Dict[str, List[str]]:
    """Copy the weights of ``modules`` from a trained checkpoint into ``model`` (fine-tuning).

    A tensor is copied when its name (after ``_head_map``) and shape match;
    the others keep their fresh initialisation (e.g. a ``conditioned``
    predictor's mode embedding when starting from a ``norm`` model).  One
    exception: a ``norm`` predictor's token embedding seeds the narrower one
    of a ``conditioned`` predictor (whose input is ``[token; mode]``, as wide
    as the norm's) with its leading columns; and a predictor of a longer
    context (``--context-size``) gets the trained convolution taps for the
    newest tokens, zeros for the older ones (same outputs at the start).
    Takes the checkpoint's final weights, not its running average.  Returns ``{"copied": [...], "kept": [...]}``
    (target names) and raises ``ValueError`` when the encoder cannot be
    copied whole (a different encoder configuration).
    """
    unknown = sorted(set(modules) - set(INIT_MODULES))
    if unknown:
        raise ValueError(f"Unknown --init-modules {unknown}; choose from {', '.join(INIT_MODULES)}")
    src = load_checkpoint(path)
    if "model" not in src:
        raise ValueError(f"{path} is not a training checkpoint (no 'model' weights)")
    src_sd = src["model"]
    dst_sd = model.state_dict()
    maps = {g: _head_map(list(src_sd), list(dst_sd), g) for g in INIT_MODULES if g not in _SHARED_MODULES}
    copied, kept, new_sd = [], [], {}
    for k, v in dst_sd.items():
        group = k.split(".")[0]
        if group not in modules:
            continue
        src_k = k
        if group in maps:
            parts = k.split(".")
            if parts[1] not in maps[group]:
                kept.append(k)
                continue
            src_k = ".".join([group, maps[group][parts[1]]] + parts[2:])
        if src_k in src_sd and src_sd[src_k].shape == v.shape:
            new_sd[k] = src_sd[src_k]
            copied.append(k)
        elif src_k in src_sd and _is_narrower_token_embedding(k, src_sd[src_k], v):
            # norm -> conditioned: the predictor's input is [token; mode], with
            # the token part mode_dim narrower; the token embedding keeps its
            # leading columns, so the copied convolution sees the trained
            # token features it was trained on (the mode channels start fresh)
            new_sd[k] = src_sd[src_k][:, : v.size(1)]
            copied.append(k)
        elif src_k in src_sd and _is_shorter_predictor_conv(k, src_sd[src_k], v):
            # a wider predictor context (--context-size): the trained taps see
            # the newest tokens, as before; the older tokens' taps start at 0
            wide = torch.zeros_like(v)
            wide[..., -src_sd[src_k].size(2):] = src_sd[src_k]
            new_sd[k] = wide
            copied.append(k)
        else:
            kept.append(k)
    if "encoder" in modules:
        missing = [k for k in kept if k.startswith("encoder.")]
        if missing:
            raise ValueError(
                f"The encoder of {path} does not match this model ({len(missing)} tensors differ, e.g. "
                f"{missing[0]}): use the same --encoder configuration"
            )
    model.load_state_dict(new_sd, strict=False)
    return {"copied": copied, "kept": kept}
