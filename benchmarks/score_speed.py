#!/usr/bin/env python3
"""How fast the scoring toolkit and the text normalization are.

Usage:
  python benchmarks/score_speed.py                 # 10,000 pairs of ~20 words
  python benchmarks/score_speed.py --num-utts 50000 --seed 7

Builds synthetic reference/hypothesis pairs (punctuated, cased, with word,
case and punctuation errors), then times:
  * zipformer_pc.metrics.score_corpus + summary() over all pairs (target: < 10 s
    for 10,000 pairs on a 2-core CPU), and
  * zipformer_pc.text.punctuated_and_normalized over the reference lines
    (target: on the order of 100k lines/s).
Prints the figures; asserts nothing.
"""

import argparse
import random
import time
from typing import List, Tuple

from zipformer_pc.metrics import markdown_header, markdown_row, score_corpus
from zipformer_pc.text import punctuated_and_normalized

VOCAB = (
    "the of and to a in that was he it his her you as had with for she not at but be "
    "my on have him is said me which by so this all from they no were if would or when "
    "what there been one could very an who them mr we now more out do are time can "
    "elizabeth darcy bennet jane bingley sister letter well-known don't o'clock"
).split()
MARKS = [",", ".", "?", ";", "!"]


def make_ref(rng: random.Random, n_words: int) -> List[str]:
    toks: List[str] = []
    cap = True
    for i in range(n_words):
        w = rng.choice(VOCAB)
        toks.append(w.capitalize() if cap or rng.random() < 0.05 else w)
        cap = False
        if i == n_words - 1:
            toks[-1] += rng.choice([".", ".", "?"])
        elif rng.random() < 0.12:
            m = rng.choice(MARKS)
            toks[-1] += m
            cap = m in ".?!"
    return toks


def make_hyp(rng: random.Random, ref: List[str]) -> List[str]:
    hyp: List[str] = []
    for t in ref:
        r = rng.random()
        if r < 0.03:
            continue  # deletion
        if r < 0.06:
            t = rng.choice(VOCAB)  # substitution
        if rng.random() < 0.05:
            t = t.swapcase()
        if rng.random() < 0.1:
            t = t.rstrip(",.?;!") + rng.choice(["", ",", "."])
        hyp.append(t)
        if rng.random() < 0.02:
            hyp.append(rng.choice(VOCAB))  # insertion
    return hyp


def make_pairs(num: int, words: int, seed: int) -> List[Tuple[str, str, str]]:
    rng = random.Random(seed)
    pairs = []
    for i in range(num):
        ref = make_ref(rng, max(1, int(rng.gauss(words, 4))))
        pairs.append((f"utt-{i:06d}", " ".join(ref), " ".join(make_hyp(rng, ref))))
    return pairs


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--num-utts", type=int, default=10000)
    p.add_argument("--words", type=int, default=20, help="Mean words per utterance")
    p.add_argument("--seed", type=int, default=0)
    return p


def main() -> None:
    args = get_parser().parse_args()
    pairs = make_pairs(args.num_utts, args.words, args.seed)
    n_words = sum(len(r.split()) for _, r, _ in pairs)

    t0 = time.perf_counter()
    summ = score_corpus(pairs).summary()
    t_score = time.perf_counter() - t0

    lines = [r for _, r, _ in pairs] + [h for _, _, h in pairs]
    t0 = time.perf_counter()
    for ln in lines:
        punctuated_and_normalized(ln)
    t_text = time.perf_counter() - t0

    print(f"{args.num_utts} utterance pairs, {n_words} reference words (seed {args.seed})")
    print(markdown_header())
    print(markdown_row("synthetic", summ))
    print(f"scoring (all metrics): {t_score:.2f} s  ({args.num_utts / t_score:.0f} pairs/s; target < 10 s for 10,000)")
    print(f"text normalization:    {len(lines) / t_text:.0f} lines/s ({len(lines)} lines, P and N each)")


if __name__ == "__main__":
    main()
