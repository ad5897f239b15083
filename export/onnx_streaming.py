#!/usr/bin/env python3
"""Streaming recognition with onnxruntime: both transcripts from one encoder pass.

The command line of the streaming runtime, :mod:`zipformer_pc.runtime`
(``zpc-transcribe`` once the package is installed); its options are in
``zipformer_pc/runtime/cli.py``.

Usage:
  # wav files and/or folders of wavs; prints both transcripts and the RTF
  python export/onnx_streaming.py --model-dir egs/synth/exp/conditioned/onnx a.wav wavs/
  # a lhotse cut manifest, scored against its P and N references
  python export/onnx_streaming.py --model-dir DIR --cuts data/synth/fbank/synth_cuts_test.jsonl.gz --int8 true
"""

from zipformer_pc.runtime import cli


def get_parser():
    """The runtime CLI's parser (a top-level function, so tools/check_args.py can check calls of this script)."""
    return cli.get_parser()


if __name__ == "__main__":
    cli.main()
