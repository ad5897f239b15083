"""Loading trained weights for inference: a checkpoint read back, the averaged weights of
``--epoch E --avg A`` / ``--iter B --avg A``, and the model built from them.

What decoding (``zipformer_pc.decoding.decode``), the export (``zipformer_pc.export``) and
the result scripts need of an experiment directory, without the training code;
``zipformer_pc.training.checkpoint`` writes the files (and re-exports these names).

Averaging (``--epoch E --avg A``): with ``--use-averaged-model`` (default) the mean of the
weights after each batch between the end of epoch E-A and the end of epoch E, recovered
exactly from the two checkpoints' running means:
``(avg_E * n_E - avg_{E-A} * n_{E-A}) / (n_E - n_{E-A})`` with n the batches each covers;
otherwise the A checkpoints' final weights are averaged.  ``--iter B --avg A`` does the same
with ``checkpoint-*.pt`` files.  Either way the batch range is logged, and weights that never
saw an optimizer step are refused.  A ``checkpoint-B.pt`` written by
``zipformer_pc.training.interpolate`` (a fine-tuned run's weights mixed with its start, key
``interpolated``) is read alone, ``--iter B --avg 1``, and described as the mix it is.
"""

import glob
import logging
import re
from pathlib import Path
from typing import Any, Dict, List, Optional

import torch

from zipformer_pc.layout import checkpoint_tag

# On disk, the running mean of a tensor that equals the weights themselves (a frozen
# encoder's, a buffer that never changed) is not stored twice: it is named here with its
# dtype and rebuilt from ``model`` on loading, exactly (``training.checkpoint`` writes it).
AVG_FROM_MODEL = "model_avg_from_model"


def _expand(state: Dict[str, Any]) -> Dict[str, Any]:
    same = state.pop(AVG_FROM_MODEL, None)
    if same:
        rebuilt = {k: state["model"][k].to(getattr(torch, d), copy=True) for k, d in same.items()}
        state["model_avg"] = {**rebuilt, **state["model_avg"]}
    return state


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
        desc = checkpoint_tag(iteration=iteration, avg=avg)
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
        desc = checkpoint_tag(epoch=epoch, avg=avg)
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
