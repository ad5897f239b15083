"""Checkpoints: atomic saving, resuming, and averaging for decoding and export.

Files in an experiment directory (icefall's layout):

* ``epoch-E.pt``: written at the end of epoch E;
* ``checkpoint-B.pt``: written every ``--save-every-n`` batches (B counts
  training batches over all epochs); only the last ``--keep-last-k`` are kept;
* each holds ``model`` (the weights), ``model_avg`` (a running average of the
  weights since batch 0, updated every ``--average-period`` batches),
  ``model_config`` (to rebuild the model), the optimizer, scheduler, sampler
  and grad-scaler states, RNG states and the training counters.

Averaging for decoding (``--epoch E --avg A``): with ``--use-averaged-model``
(default) the average of the weights between the end of epoch E-A and the end
of epoch E is recovered exactly from the two running averages:
``(avg_E * n_E - avg_{E-A} * n_{E-A}) / (n_E - n_{E-A})`` with n the batch
counts; otherwise the A checkpoints' weights are averaged.  ``--iter B``
does the same with ``checkpoint-*.pt`` files.
"""

import glob
import logging
import os
import re
from pathlib import Path
from typing import Any, Dict, List, Optional

import torch


def save_checkpoint(path: Path, state: Dict[str, Any]) -> None:
    """Write ``state`` to ``path`` atomically (a crash never leaves a half-written file)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)


def load_checkpoint(path: Path) -> Dict[str, Any]:
    if not Path(path).is_file():
        raise FileNotFoundError(f"Checkpoint {path} not found")
    return torch.load(path, map_location="cpu", weights_only=False)


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


def average_between(start: Dict[str, Any], end: Dict[str, Any]) -> Dict[str, torch.Tensor]:
    """Weights averaged over the batches between two checkpoints, from their running averages."""
    n0 = int(start["batch_idx_train"])
    n1 = int(end["batch_idx_train"])
    if n1 <= n0:
        raise ValueError(f"Cannot average: end checkpoint ({n1} batches) is not after the start ({n0})")
    w0, w1 = n0 / (n1 - n0), n1 / (n1 - n0)
    out = {}
    for k, v in end["model_avg"].items():
        if v.is_floating_point():
            out[k] = (v.to(torch.float64) * w1 - start["model_avg"][k].to(torch.float64) * w0).to(v.dtype)
        else:
            out[k] = v.clone()
    return out


def averaged_weights(
    exp_dir: Path, epoch: int = 0, avg: int = 1, iteration: int = 0, use_averaged_model: bool = True
) -> Dict[str, Any]:
    """Weights for decoding/export and the ``model_config`` to build them into.

    ``iteration > 0`` selects ``checkpoint-*.pt`` files (the newest one at or
    before that batch and the ``avg - 1`` before it); otherwise ``epoch-*.pt``.
    """
    exp_dir = Path(exp_dir)
    if iteration > 0:
        cands = [p for p in batch_checkpoints(exp_dir) if int(re.search(r"(\d+)\.pt$", p.name).group(1)) <= iteration]
        if len(cands) < avg + (1 if use_averaged_model else 0):
            raise FileNotFoundError(
                f"Need {avg + int(use_averaged_model)} checkpoint-*.pt files at or before batch {iteration} in {exp_dir}, found {len(cands)}"
            )
        if use_averaged_model:
            end, start = load_checkpoint(cands[0]), load_checkpoint(cands[avg])
            return {"model": average_between(start, end), "model_config": end["model_config"], "desc": f"iter-{iteration}-avg-{avg}"}
        states = [load_checkpoint(p) for p in cands[:avg]]
        return {"model": average_state_dicts([s["model"] for s in states]), "model_config": states[0]["model_config"],
                "desc": f"iter-{iteration}-avg-{avg}"}
    if epoch < 1:
        raise ValueError("Give --epoch E >= 1 (or --iter B)")
    if use_averaged_model:
        end = load_checkpoint(exp_dir / f"epoch-{epoch}.pt")
        if epoch - avg < 1:
            # from the start of training: the running average itself
            logging.info(f"Using the running average of epoch-{epoch}.pt (all batches since the start)")
            return {"model": end["model_avg"], "model_config": end["model_config"], "desc": f"epoch-{epoch}-avg-{avg}"}
        start = load_checkpoint(exp_dir / f"epoch-{epoch - avg}.pt")
        return {"model": average_between(start, end), "model_config": end["model_config"], "desc": f"epoch-{epoch}-avg-{avg}"}
    first = max(1, epoch - avg + 1)
    states = [load_checkpoint(exp_dir / f"epoch-{e}.pt") for e in range(first, epoch + 1)]
    return {"model": average_state_dicts([s["model"] for s in states]), "model_config": states[-1]["model_config"],
            "desc": f"epoch-{epoch}-avg-{avg}"}


def load_model_for_inference(
    exp_dir: Path, epoch: int = 0, avg: int = 1, iteration: int = 0, use_averaged_model: bool = True
):
    """Build the model from the checkpoint's config and load (averaged) weights; eval mode."""
    from zipformer_pc.model import build_model

    w = averaged_weights(exp_dir, epoch, avg, iteration, use_averaged_model)
    model = build_model(w["model_config"])
    model.load_state_dict(w["model"])
    model.eval()
    model.desc = w["desc"]  # type: ignore[attr-defined]
    return model


def update_averaged_model(model_avg: torch.nn.Module, model: torch.nn.Module, batch_idx_train: int, average_period: int) -> None:
    """Running average since batch 0, updated every ``average_period`` batches."""
    weight_cur = average_period / batch_idx_train
    weight_avg = 1.0 - weight_cur
    cur = model.state_dict()
    with torch.no_grad():
        for k, v in model_avg.state_dict().items():
            if v.is_floating_point():
                v.mul_(weight_avg).add_(cur[k].detach().to(v.dtype), alpha=weight_cur)
            else:
                v.copy_(cur[k])


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


INIT_MODULES = ("encoder", "decoders", "joiners", "simple_am_proj", "simple_lm_proj", "ctc_output")


def init_from_checkpoint(model: torch.nn.Module, path: Path, modules: List[str]) -> Dict[str, List[str]]:
    """Copy the weights of ``modules`` from a trained checkpoint into ``model`` (fine-tuning).

    A tensor is copied when its name (after ``_head_map``) and shape match;
    the others keep their fresh initialisation (e.g. a ``conditioned``
    predictor's convolution, whose input includes the mode embedding, when
    starting from a ``norm`` model).  Takes the checkpoint's final weights,
    not its running average.  Returns ``{"copied": [...], "kept": [...]}``
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
    maps = {g: _head_map(list(src_sd), list(dst_sd), g) for g in INIT_MODULES if g not in ("encoder", "ctc_output")}
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
