"""Training: the optimizer and schedule, checkpoints (saving, resuming, averaging)
and the training loop (``python -m zipformer_pc.training.train``)."""
