"""Decoding test sets with a trained checkpoint: search (greedy, beam) and the
scored results (``python -m zipformer_pc.decoding.decode``)."""
