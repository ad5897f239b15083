"""Grow a trained model's encoder deeper, for ``train.py --init-from``: a larger model that
does not start from scratch (which a CPU cannot afford).

Usage:
  python -m zipformer_pc.training.grow --from egs/synth/pretrained/conditioned.pt \\
      --num-encoder-layers 2,2,2,2,2,2 --out EXP/grown.pt
  python -m zipformer_pc.training.train --init-from EXP/grown.pt --init-modules all ...

(``train.py --init-from`` takes the encoder's sizes from the checkpoint, so the
run trains the grown encoder.)  ``--num-encoder-layers`` gives each stack at
least as many layers as the trained model has (the tiny encoder: one per
stack); everything else of the encoder stays as it was.  A stack's layers are
the trained ones, in order; each new layer after them is a copy of the
stack's last trained layer whose two
bypasses (``ZipformerLayer.bypass_mid`` and ``.bypass``: ``x + c * (layer(x) -
x)``) start at their smallest scale (``--new-bypass-scale``, 0.2 = the clamp's
floor), so that the grown model starts near the trained one and training
decides how much the new layers add.  Everything else (the stacks' own
bypasses, the front end, predictor and joiner) is copied unchanged.  The
output holds ``model`` (fp32) and ``model_config`` (the trained model's, with
the new encoder) and says where it came from (``grown_from``).
"""

import argparse
import dataclasses
import logging
import re
import sys
from pathlib import Path
from typing import Dict, List, Optional

import torch

from zipformer_pc.logs import setup_logging
from zipformer_pc.model.zipformer import EncoderConfig

_LAYER_KEY = re.compile(r"^encoder\.stacks\.(\d+)\.layers\.(\d+)\.(.+)$")
_BYPASSES = ("bypass_mid.scale", "bypass.scale")
# the encoder fields that must agree between the trained model and the grown one (all but the depth)
_WIDTH_FIELDS = [f.name for f in dataclasses.fields(EncoderConfig) if f.name != "num_encoder_layers"]


def grown_weights(model: Dict[str, torch.Tensor], old: EncoderConfig, new: EncoderConfig,
                  new_bypass_scale: float = 0.2) -> Dict[str, torch.Tensor]:
    """The state dict of a model with ``new``'s encoder from ``model`` (one with ``old``'s): see the
    module's doc.  Raises ValueError when ``new`` is not ``old`` made deeper."""
    differ = [f for f in _WIDTH_FIELDS if getattr(old, f) != getattr(new, f)]
    if differ:
        raise ValueError(f"the encoders differ in more than depth ({', '.join(differ)}): only "
                         "num_encoder_layers may grow")
    have, want = old.stack_values("num_encoder_layers"), new.stack_values("num_encoder_layers")
    if len(want) != len(have) or any(w < h for h, w in zip(have, want)):
        raise ValueError(f"the grown encoder needs as many stacks as the trained one ({len(have)}), each with at "
                         f"least its layers ({old.num_encoder_layers}), not {new.num_encoder_layers}")
    out: Dict[str, torch.Tensor] = {}
    last_layer: Dict[int, Dict[str, torch.Tensor]] = {}
    for key, value in model.items():
        value = value.float() if value.is_floating_point() else value
        out[key] = value.clone()
        m = _LAYER_KEY.match(key)
        if m and int(m.group(2)) == have[int(m.group(1))] - 1:
            last_layer.setdefault(int(m.group(1)), {})[m.group(3)] = value
    for stack, (h, w) in enumerate(zip(have, want)):
        for j in range(h, w):
            for name, value in last_layer[stack].items():
                copy = value.clone()
                if name in _BYPASSES:
                    copy.fill_(new_bypass_scale)
                out[f"encoder.stacks.{stack}.layers.{j}.{name}"] = copy
    return out


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--from", dest="source", type=Path, required=True,
                   help="a .pt with model weights and model_config (a shipped model, a checkpoint)")
    p.add_argument("--num-encoder-layers", required=True,
                   help="layers per stack of the grown encoder, e.g. 2,2,2,2,2,2 (the tiny encoder has 1 each)")
    p.add_argument("--out", type=Path, required=True, help="the grown .pt, for train.py --init-from")
    p.add_argument("--new-bypass-scale", type=float, default=0.2,
                   help="the new layers' bypass scale at the start (0.2: the clamp's floor) [0.2]")
    args = p.parse_args(argv)
    setup_logging()
    try:
        src = torch.load(args.source, map_location="cpu", weights_only=False)
        if "model" not in src or "model_config" not in src:
            raise ValueError("no model weights with their model_config in it")
        old = EncoderConfig(**src["model_config"]["encoder"])
        new = dataclasses.replace(old, num_encoder_layers=args.num_encoder_layers)
        weights = grown_weights(src["model"], old, new, args.new_bypass_scale)
    except (OSError, ValueError, KeyError, TypeError) as e:
        logging.error(f"--from {args.source}: {e}")
        return 2
    config = dict(src["model_config"], encoder=dataclasses.asdict(new))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"model": weights, "model_config": config, "grown_from": str(args.source),
                "batch_idx_train": 0}, args.out)
    added = len(weights) - len(src["model"])
    logging.info(f"{args.out}: {args.source}'s encoder grown from {old.num_encoder_layers} to "
                 f"{new.num_encoder_layers} layers per stack ({added} new tensors; the new layers' bypasses "
                 f"at {args.new_bypass_scale})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
