"""Punctuation and truecasing restoration of N text: the cascade baseline and the
auto-punctuated P' references.

A small bidirectional transformer over sentencepiece pieces predicts, for every
word, a case class and the mark that follows it (Pappagari et al.).  The flow:

* :mod:`.data`: labelled lines from P text or cut manifests, pieces, batches;
* :mod:`.model`: :class:`~.model.RestorationModel`, its config and checkpoints,
  and :class:`~.model.Restorer` (torch inference);
* :mod:`.train`: the training loop, and the command line that trains a model
  (``python -m zipformer_pc.restoration.train``);
* :mod:`.evaluate`: per-class precision / recall / F1 and the corpus metrics;
* :mod:`.export`: ONNX export with its check against torch
  (``python -m zipformer_pc.restoration.export``);
* :mod:`.apply`: restoring N hypotheses or text files
  (``python -m zipformer_pc.restoration.apply``).

The label inventory and the torch-free ONNX inference live in
:mod:`zipformer_pc.runtime.restoration`.
"""
