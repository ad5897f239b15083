#!/usr/bin/env python3
"""Parameter counts of every model type, beside the paper's figures.

Usage:
  python benchmarks/param_counts.py                 # paper config, 500 tokens
  python benchmarks/param_counts.py --encoder tiny --vocab-size 256

Counts include the k2 "simple" projections used by the pruned loss (GPU
training) and, in the last column, exclude them (CPU training with the full
loss, and every exported model).
"""

import argparse

from zipformer_pc.model.transducer import HeadConfig, build_model, head_dim, make_model_config
from zipformer_pc.modes import MODEL_TYPES
from zipformer_pc.model.zipformer import count_parameters

PAPER = {"conditioned": "70M", "two-decoder": "71M", "punct": "-", "norm": "-"}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--encoder", default="paper")
    p.add_argument("--vocab-size", type=int, default=500)
    args = p.parse_args()
    small = args.encoder == "tiny"
    dim = head_dim(args.encoder)
    print(f"encoder {args.encoder}, {args.vocab_size} tokens, decoder/joiner dim {dim}, mode dim 12")
    print("| model type | parameters (pruned-loss training) | paper | without simple projections |")
    print("|---|---|---|---|")
    for mt in MODEL_TYPES:
        counts = []
        for simple in (True, False):
            head = HeadConfig(model_type=mt, vocab_size=args.vocab_size, decoder_dim=dim, joiner_dim=dim,
                              with_simple_proj=simple)
            counts.append(count_parameters(build_model(make_model_config(args.encoder, {}, head))))
        print(f"| {mt} | {counts[0] / 1e6:.2f}M | {PAPER[mt] if not small else '-'} | {counts[1] / 1e6:.2f}M |")


if __name__ == "__main__":
    main()
