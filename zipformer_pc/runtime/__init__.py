"""The streaming runtime: exported ONNX models run with onnxruntime, no torch, no lhotse.

Its whole import path needs only onnxruntime, numpy and kaldi-native-fbank
(and sentencepiece for the restoration model of the cascade);
``tests/runtime/test_runtime_light.py`` imports it with torch and lhotse blocked.

* :mod:`~zipformer_pc.runtime.recognizer`: :class:`StreamingRecognizer`
  (the encoder once per chunk, greedy search per output mode, with sherpa-onnx's
  conventions) and :func:`find_model_files`;
* :mod:`~zipformer_pc.runtime.stream`: :class:`Stream`, one utterance being
  recognized (audio, online fbank, encoder states, hypotheses);
* :mod:`~zipformer_pc.runtime.audio`: :func:`read_wav` and the streaming
  :class:`Resampler`;
* :mod:`~zipformer_pc.runtime.restoration`: punctuation and truecasing
  restoration of N text (:class:`~zipformer_pc.runtime.restoration.OnnxRestorer`);
* :mod:`~zipformer_pc.runtime.utterances`: a list of wav files or cuts
  decoded in turn (RTF, counted skips) and scored per mode or per speaker;
* :mod:`~zipformer_pc.runtime.hotwords` and :mod:`~zipformer_pc.runtime.context_graph`:
  hotword lists, each mode's form and pieces, and the Aho-Corasick graph
  that modified beam search favours them with;
* :mod:`~zipformer_pc.runtime.subtitles`: SRT and WebVTT cues and JSON
  documents of an input's segments (the command line's ``--format``);
* :mod:`~zipformer_pc.runtime.cli`: the command line (``python -m zipformer_pc.transcribe``,
  ``zpc-transcribe``).
"""

from zipformer_pc.runtime.audio import Resampler, read_wav
from zipformer_pc.runtime.recognizer import StreamingRecognizer, fbank_options_from_metadata, find_model_files
from zipformer_pc.runtime.stream import Stream

__all__ = ["Resampler", "Stream", "StreamingRecognizer", "fbank_options_from_metadata", "find_model_files",
           "read_wav"]
