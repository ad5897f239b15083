#!/usr/bin/env python3
"""Export the restoration model to ONNX and check it against PyTorch.

Usage:
  python -m zipformer_pc.restoration.export --checkpoint egs/synth/exp/restore_default/best-valid-loss.pt \
      --output egs/synth/exp/restore_default/restore.onnx

Inputs ``tokens`` (N, T) int64 and ``lengths`` (N,) int64, outputs
``case_logits`` (N, T, 4) and ``punct_logits`` (N, T, P), with dynamic N and
T (opset 17, the TorchScript-based exporter).  The restoration config and
the sentencepiece model are stored as metadata, so the file alone is enough
for zipformer_pc.runtime.restoration.OnnxRestorer (onnxruntime, numpy and
sentencepiece only).  The export is checked on a random batch of another
shape; the script fails when any logit differs from PyTorch's by more
than ``--atol``.
"""

import argparse
import base64
import json
import logging
import os
import warnings
from pathlib import Path

import numpy as np
import torch

from zipformer_pc.logs import setup_logging
from zipformer_pc.restoration.model import load_restoration_checkpoint
from zipformer_pc.runtime.restoration import META_CONFIG, META_SPM, OnnxRestorer


def export_onnx(checkpoint: str, out_path: str, opset: int = 17, atol: float = 1e-4, seed: int = 0) -> float:
    """Export a checkpoint to ONNX (dynamic batch and length) and check it against torch.

    The file carries the restoration config and the sentencepiece model as
    metadata, so :class:`OnnxRestorer` needs nothing else.  The check runs
    both on a random batch with a different shape than the export's and
    raises ``RuntimeError`` when any unpadded logit differs by more than
    ``atol``.  Returns the largest difference.
    """
    import onnx

    model, spm_model, meta, _ = load_restoration_checkpoint(checkpoint)
    gen = torch.Generator().manual_seed(seed)
    vocab = model.cfg.vocab_size
    tokens = torch.randint(0, vocab, (2, 11), generator=gen)
    lengths = torch.tensor([11, 6])
    out = Path(out_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    with warnings.catch_warnings():
        # The TorchScript-based exporter is chosen on purpose (dynamo=False); silence its deprecation notice.
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.onnx.export(
            model, (tokens, lengths), str(tmp), dynamo=False, opset_version=opset,
            input_names=["tokens", "lengths"], output_names=["case_logits", "punct_logits"],
            dynamic_axes={"tokens": {0: "N", 1: "T"}, "lengths": {0: "N"},
                          "case_logits": {0: "N", 1: "T"}, "punct_logits": {0: "N", 1: "T"}},
        )
    proto = onnx.load(str(tmp))
    for key, value in ((META_CONFIG, json.dumps(meta)), (META_SPM, base64.b64encode(spm_model).decode("ascii")),
                       ("model_type", "zipformer_pc_restoration")):
        prop = proto.metadata_props.add()
        prop.key, prop.value = key, value
    onnx.save(proto, str(tmp))
    os.replace(tmp, out)

    check_tokens = torch.randint(0, vocab, (3, 29), generator=gen)
    check_lengths = torch.tensor([29, 17, 1])
    with torch.no_grad():
        ref = [t.numpy() for t in model(check_tokens, check_lengths)]
    got = OnnxRestorer(str(out)).logits(check_tokens.numpy(), check_lengths.numpy())
    diff = 0.0
    for r, g in zip(ref, got):
        for row, n in enumerate(check_lengths.tolist()):
            diff = max(diff, float(np.abs(r[row, :n] - g[row, :n]).max()))
    if not diff <= atol:
        raise RuntimeError(f"ONNX and torch logits differ by {diff:.3g} > {atol} ({out}); do not use this export")
    logging.info(f"Exported {out} (opset {opset}); max |ONNX - torch| logit difference {diff:.2e} <= {atol}")
    return diff



def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--output", required=True, help="The .onnx file to write")
    p.add_argument("--opset", type=int, default=17)
    p.add_argument("--atol", type=float, default=1e-4, help="Largest allowed |ONNX - torch| logit difference")
    p.add_argument("--seed", type=int, default=0, help="Random check input")
    return p


def main() -> None:
    setup_logging()
    args = get_parser().parse_args()
    torch.set_num_threads(1)
    try:
        export_onnx(args.checkpoint, args.output, opset=args.opset, atol=args.atol, seed=args.seed)
    except RuntimeError as e:
        raise SystemExit(f"Export check failed: {e}") from None


if __name__ == "__main__":
    main()
