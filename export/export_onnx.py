#!/usr/bin/env python3
"""Export a trained causal model to ONNX for streaming (onnxruntime / sherpa-onnx).

The command line of :mod:`zipformer_pc.export.onnx_export` (the export library and
the description of the files it writes).

Usage:
  python export/export_onnx.py --exp-dir egs/synth/exp/conditioned --epoch 30 --avg 5 \\
      --tokens data/synth/lang_bpe_256/tokens.txt --chunk-size 32 --left-context-frames 128 [--int8 true]
"""

from zipformer_pc.export import onnx_export


def get_parser():
    """The export's parser (a top-level function, so tools/check_args.py can check calls of this script)."""
    return onnx_export.get_parser()


if __name__ == "__main__":
    onnx_export.main()
