"""The data a model learns from: cut references (N, P, P'), the tokenizer, and the
batches and samplers shared by training and decoding."""
