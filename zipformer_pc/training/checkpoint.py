"""Checkpoints: atomic saving, resuming, and averaging for decoding and export.

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

Averaging for decoding and export (``--epoch E --avg A``): with
``--use-averaged-model`` (default) the mean of the weights after each batch
between the end of epoch E-A and the end of epoch E, recovered exactly from
the two running means: ``(avg_E * n_E - avg_{E-A} * n_{E-A}) / (n_E - n_{E-A})``
with n the batches each covers; otherwise the A checkpoints' final weights
are averaged.  ``--iter B --avg A`` does the same with ``checkpoint-*.pt``
files.  Either way the batch range is logged, and weights that never saw an
optimizer step are refused.  A ``checkpoint-B.pt`` written by
``zipformer_pc.training.interpolate`` (a fine-tuned run's weights mixed with
its start, key ``interpolated``) is read alone, ``--iter B --avg 1``, and
described as the mix it is.
"""

import glob
import logging
import os
import re
from pathlib import Path
from typing import Any, Dict, List, Optional

import torch


# On disk, the running mean of a tensor that equals the weights themselves (a frozen
# encoder's, a buffer that never changed) is not stored twice: it is named here with its
# dtype and rebuilt from ``model`` on loading, exactly.  The float64 means are two thirds
# of a checkpoint; a fine-tune with a frozen encoder writes 28 MB instead of 68 (tiny).
_AVG_FROM_MODEL = "model_avg_from_model"


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


def _expand(state: Dict[str, Any]) -> Dict[str, Any]:
    same = state.pop(_AVG_FROM_MODEL, None)
    if same:
        rebuilt = {k: state["model"][k].to(getattr(torch, d), copy=True) for k, d in same.items()}
        state["model_avg"] = {**rebuilt, **state["model_avg"]}
    return state


def save_checkpoint(path: Path, state: Dict[str, Any]) -> None:
    """Write ``state`` to ``path`` atomically (a crash never leaves a half-written file)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    torch.save(_compact(state), tmp)
    os.replace(tmp, path)


def load_checkpoint(path: Path) -> Dict[str, Any]:
    """A checkpoint as it was saved (running means stored once with the weights are rebuilt)."""
    if not Path(path).is_file():
        raise FileNotFoundError(f"Checkpoint {path} not found")
    return _expand(torch.load(path, map_location="cpu", weights_only=False))


def batch_checkpoints(exp_dir: Path) -> List[Path]:
    """``checkpoint-B.pt`` files, newest (largest B) first."""
    found = []
    for p in glob.glob(str(Path(exp_dir) / "checkpoint-*.pt")):
        m = re.search(r"checkpoint-(\d+)\.pt$", p)
        if m:
            found.append((int(m.group(1)), Path(p)))
    return [p for _, p in sorted(found, reverse=True)]


def remove_old_checkpoints(exp_dir: Path, keep_last_k: int) -> None:
    if keep_last_k <= 0:
        return
    for p in batch_checkpoints(exp_dir)[keep_last_k:]:
        p.unlink(missing_ok=True)


def average_state_dicts(states: List[Dict[str, torch.Tensor]]) -> Dict[str, torch.Tensor]:
    """Element-wise mean of floating-point tensors; other tensors from the last state."""
    out = {}
    n = len(states)
    for k, v in states[-1].items():
        if v.is_floating_point():
            acc = torch.zeros_like(v, dtype=torch.float64)
            for s in states:
                acc += s[k].to(torch.float64)
            out[k] = (acc / n).to(v.dtype)
        else:
            out[k] = v.clone()
    return out


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


def _avg_batches(ck: Dict[str, Any], name: str) -> int:
    n = ck.get("model_avg_batches")
    if n is None:
        raise ValueError(f"{name} has no exact running average (written by an older version of train.py): "
                         "decode it with --use-averaged-model false")
    return int(n)


def average_between(start: Optional[Dict[str, Any]], end: Dict[str, Any]) -> Dict[str, torch.Tensor]:
    """Mean of the weights after each batch in ``(start, end]``, from the two checkpoints' running means.

    ``start=None`` means the start of training (the mean of batches ``1..end``).
    """
    n0 = _avg_batches(start, "The start checkpoint") if start is not None else 0
    n1 = _avg_batches(end, "The end checkpoint")
    if n1 <= n0:
        raise ValueError(f"Cannot average: the end checkpoint ({n1} batches) is not after the start ({n0})")
    w0, w1 = n0 / (n1 - n0), n1 / (n1 - n0)
    out = {}
    for k, v in end["model_avg"].items():
        if v.is_floating_point() and n0 > 0:
            out[k] = v.to(torch.float64) * w1 - start["model_avg"][k].to(torch.float64) * w0  # type: ignore[index]
        else:
            out[k] = v.clone()
    return out


def _steps(ck: Dict[str, Any]) -> int:
    """Optimizer updates behind a checkpoint's weights (older checkpoints: their batch count)."""
    return int(ck.get("optimizer_steps", ck.get("batch_idx_train", 0)))


def _check_trained(ck: Dict[str, Any], name: str) -> None:
    if _steps(ck) <= 0:
        raise ValueError(f"{name} holds weights that never saw a training step "
                         f"({ck.get('batch_idx_train', 0)} batches, none updated the model): refusing to use them")


def _all_checkpoints_kept(exp_dir: Path) -> bool:
    """Whether no ``checkpoint-*.pt`` can have been removed by ``--keep-last-k`` (read
    from the newest checkpoint's arguments; unknown counts as "maybe removed")."""
    found = batch_checkpoints(exp_dir)
    if not found:
        return False
    keep = (load_checkpoint(found[0]).get("args") or {}).get("keep_last_k")
    return keep is not None and (keep <= 0 or len(found) < keep)


def averaged_weights(
    exp_dir: Path, epoch: int = 0, avg: int = 1, iteration: int = 0, use_averaged_model: bool = True
) -> Dict[str, Any]:
    """Weights for decoding/export, the ``model_config`` to build them into, and what they are.

    ``--epoch E --avg A``: the mean of the weights after every batch between
    the end of epoch E-A (the start of training when E-A < 1) and the end of
    epoch E.  ``--iter B --avg A``: between ``checkpoint-B.pt`` and the A-th
    ``checkpoint-*.pt`` before it, or the start of training when there are
    only A checkpoints up to B and ``--keep-last-k`` removed none.  With ``use_averaged_model=False`` the A
    checkpoints' final weights are averaged instead (icefall's plain mode).

    Returns ``model``, ``model_config``, ``desc`` (``epoch-E-avg-A`` or
    ``iter-B-avg-A``, used in file names) and ``batches`` (first, last): the
    training batches the weights stand for.  Raises ``ValueError`` or
    ``FileNotFoundError`` with a clear message when the interval cannot be
    recovered exactly or holds untrained weights.
    """
    exp_dir = Path(exp_dir)
    if avg < 1:
        raise ValueError(f"--avg must be >= 1, got {avg}")
    iter_from_start = False
    if iteration > 0:
        desc = f"iter-{iteration}-avg-{avg}"
        cands = [p for p in batch_checkpoints(exp_dir) if int(re.search(r"(\d+)\.pt$", p.name).group(1)) <= iteration]
        if not cands or cands[0].name != f"checkpoint-{iteration}.pt":
            have = ", ".join(p.name for p in batch_checkpoints(exp_dir)[:5]) or "none"
            raise FileNotFoundError(f"--iter {iteration}: {exp_dir}/checkpoint-{iteration}.pt not found (newest: {have})")
        need = avg + 1 if use_averaged_model else avg
        # the A-th checkpoint back is the first of the run: the interval starts with training
        iter_from_start = use_averaged_model and len(cands) == avg and _all_checkpoints_kept(exp_dir)
        if len(cands) < need and not iter_from_start:
            raise FileNotFoundError(
                f"--iter {iteration} --avg {avg} needs {need} checkpoint-*.pt files at or before batch {iteration} "
                f"in {exp_dir}, found {len(cands)} (older ones may have been removed by --keep-last-k)"
            )
        paths = cands[:need][::-1]  # oldest first
    else:
        if epoch < 1:
            raise ValueError("Give --epoch E >= 1 (or --iter B)")
        desc = f"epoch-{epoch}-avg-{avg}"
        first = epoch - avg if use_averaged_model else epoch - avg + 1
        paths = [exp_dir / f"epoch-{e}.pt" for e in range(max(first, 1), epoch + 1)]
        if not use_averaged_model and first < 1:
            raise FileNotFoundError(f"--epoch {epoch} --avg {avg}: there is no epoch {first}")
    if use_averaged_model:
        end = load_checkpoint(paths[-1])
        _check_trained(end, paths[-1].name)
        from_start = iter_from_start if iteration > 0 else epoch - avg < 1
        start = None if from_start else load_checkpoint(paths[0])
        weights = average_between(start, end)
        first_b = 1 if start is None else _avg_batches(start, paths[0].name) + 1
        last_b = _avg_batches(end, paths[-1].name)
        how = f"mean of the weights after each of batches {first_b}..{last_b}"
        model_config = end["model_config"]
    else:
        states = [load_checkpoint(p) for p in paths]
        for p, s in zip(paths, states):
            _check_trained(s, p.name)
        weights = average_state_dicts([s["model"] for s in states])
        batches = [int(s["batch_idx_train"]) for s in states]
        first_b, last_b = batches[0], batches[-1]
        how = f"plain mean of the final weights of {', '.join(p.name for p in paths)} (batches {', '.join(map(str, batches))})"
        model_config = states[-1]["model_config"]
        end = states[-1]
    mix = end.get("interpolated")
    if mix is not None:  # written by zipformer_pc.training.interpolate: it stands alone
        if len(paths) != 1:
            raise ValueError(f"{paths[-1]} holds interpolated weights (zipformer_pc.training.interpolate): "
                             f"use it alone (--iter {iteration or '?'} --avg 1), not averaged with others")
        how = mix["how"]
        first_b, last_b = mix["batches"]
    logging.info(f"{desc}: {how} ({exp_dir})")
    return {"model": weights, "model_config": model_config, "desc": desc, "batches": (first_b, last_b),
            "how": how}


def load_model_for_inference(
    exp_dir: Path, epoch: int = 0, avg: int = 1, iteration: int = 0, use_averaged_model: bool = True
):
    """Build the model from the checkpoint's config and load (averaged) weights; eval mode.

    The model carries ``desc`` (``epoch-E-avg-A``) and ``averaged`` (which
    batches, how) for logs and result files.
    """
    from zipformer_pc.model.transducer import build_model

    w = averaged_weights(exp_dir, epoch, avg, iteration, use_averaged_model)
    model = build_model(w["model_config"])
    model.load_state_dict({k: v.to(torch.float32) if v.is_floating_point() else v for k, v in w["model"].items()})
    model.eval()
    model.desc = w["desc"]  # type: ignore[attr-defined]
    model.averaged = w["how"]  # type: ignore[attr-defined]
    return model


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
