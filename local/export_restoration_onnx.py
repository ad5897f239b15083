#!/usr/bin/env python3
"""Export the restoration model to ONNX and check it against PyTorch.

Usage:
  ./local/export_restoration_onnx.py --checkpoint egs/synth/exp/restore_default/best-valid-loss.pt \
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
import logging

import torch

from zipformer_pc.restore import export_onnx


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--output", required=True, help="The .onnx file to write")
    p.add_argument("--opset", type=int, default=17)
    p.add_argument("--atol", type=float, default=1e-4, help="Largest allowed |ONNX - torch| logit difference")
    p.add_argument("--seed", type=int, default=0, help="Random check input")
    return p


def main() -> None:
    logging.basicConfig(format="%(asctime)s %(levelname)s [%(filename)s:%(lineno)d] %(message)s", level=logging.INFO)
    args = get_parser().parse_args()
    torch.set_num_threads(1)
    try:
        export_onnx(args.checkpoint, args.output, opset=args.opset, atol=args.atol, seed=args.seed)
    except RuntimeError as e:
        raise SystemExit(f"Export check failed: {e}") from None


if __name__ == "__main__":
    main()
