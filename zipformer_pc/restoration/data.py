"""Restoration training data: labelled lines from P text or cut manifests, the
mixed-case lexicon, the sentencepiece model, pieces and batches."""

import io
import logging
import random
from collections import Counter
from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

import torch

from zipformer_pc.data.references import get_p
from zipformer_pc.runtime.restoration import MIX, LabeledLine, PieceEncoder, case_class, labels_from_p, pad_batch
from zipformer_pc.text import PunctConfig, scoring_pairs
from zipformer_pc.transcripts import is_cut_manifest


@dataclass
class PrepStats:
    """What became of the input lines of :func:`prepare_examples`."""

    lines: int = 0
    kept: int = 0
    skipped_empty: int = 0  # blank lines
    skipped_no_words: int = 0  # lines with only marks or symbols

    def log(self, name: str) -> None:
        logging.info(
            f"{name}: {self.kept} of {self.lines} lines kept; skipped {self.skipped_empty} empty and "
            f"{self.skipped_no_words} without any word"
        )


def prepare_examples(lines: Iterable[str], config: PunctConfig) -> Tuple[List[LabeledLine], PrepStats]:
    """Targets of P (or raw punctuated) lines; lines with no word are skipped and counted."""
    stats = PrepStats()
    out: List[LabeledLine] = []
    for line in lines:
        stats.lines += 1
        if not line.strip():
            stats.skipped_empty += 1
            continue
        ex = labels_from_p(line, config)
        if ex is None:
            stats.skipped_no_words += 1
            continue
        out.append(ex)
        stats.kept += 1
    return out, stats


def build_mix_lexicon(lines: Iterable[str], config: PunctConfig) -> Dict[str, str]:
    """Lowercase word -> its most frequent mixed-case spelling (``MIX`` class) in the lines."""
    counts: Dict[str, Counter] = {}
    for line in lines:
        for word, _ in scoring_pairs(line, config):
            if case_class(word) == MIX:
                counts.setdefault(word.lower(), Counter())[word] += 1
    # Most frequent spelling; ties broken alphabetically so the lexicon is deterministic.
    return {w: min(c.items(), key=lambda kv: (-kv[1], kv[0]))[0] for w, c in sorted(counts.items())}


def read_text_lines(path: str) -> List[str]:
    """A plain text file, one utterance a line (blank lines are kept, to be counted by the caller)."""
    with open(path, encoding="utf-8") as f:
        return f.read().splitlines()


def read_cut_references(path: str, use_auto: bool = False) -> List[Tuple[str, str]]:
    """``(supervision id, P)`` of every supervision of a cut manifest that has a P reference."""
    from lhotse import load_manifest_lazy

    out: List[Tuple[str, str]] = []
    missing = 0
    for cut in load_manifest_lazy(path):
        for sup in cut.supervisions:
            p = get_p(sup, use_auto)
            if p is None:
                missing += 1
            else:
                out.append((sup.id, p))
    logging.info(f"{path}: {len(out)} supervisions with a P reference, {missing} without (not used)")
    return out


def read_references(path: str) -> List[Tuple[str, str]]:
    """``(id, P)`` pairs from a cut manifest (``.jsonl.gz``/``.jsonl``) or a text file (ids are line numbers)."""
    if is_cut_manifest(path):
        return read_cut_references(path)
    return [(f"line-{i}", line) for i, line in enumerate(read_text_lines(path), 1)]


def train_sentencepiece(n_lines: Sequence[str], vocab_size: int) -> bytes:
    """A unigram sentencepiece model of N text, returned serialized.

    ``vocab_size`` is an upper bound: a small corpus gets fewer pieces.
    """
    import sentencepiece as spm

    if not n_lines:
        raise ValueError("No text to train the sentencepiece model on")
    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(n_lines),
        model_writer=buf,
        model_type="unigram",
        vocab_size=vocab_size,
        hard_vocab_limit=False,
        character_coverage=1.0,
        shuffle_input_sentence=False,
        num_threads=1,  # deterministic
        minloglevel=2,
    )
    return buf.getvalue()


@dataclass
class Encoded:
    """One training line in pieces."""

    ids: List[int]
    first: List[int]
    last: List[int]
    case: List[int]
    punct: List[int]


def encode_examples(examples: Sequence[LabeledLine], encoder: PieceEncoder, max_words: int) -> List[Encoded]:
    """Pieces of the examples; lines longer than ``max_words`` are cut into windows (as at inference)."""
    out: List[Encoded] = []
    for ex in examples:
        for s in range(0, len(ex.words), max_words):
            ids, first, last = encoder.encode(ex.words[s : s + max_words])
            out.append(Encoded(ids, first, last, ex.case[s : s + max_words], ex.punct[s : s + max_words]))
    return out


@dataclass
class RestorationBatch:
    tokens: torch.Tensor  # (B, T)
    lengths: torch.Tensor  # (B,)
    rows: torch.Tensor  # (W,) batch row of each word
    first: torch.Tensor  # (W,) piece index of each word's first piece
    last: torch.Tensor  # (W,) ... and last piece
    case: torch.Tensor  # (W,)
    punct: torch.Tensor  # (W,)


def make_batch(items: Sequence[Encoded]) -> RestorationBatch:
    tokens, lengths = pad_batch([e.ids for e in items])
    rows = [i for i, e in enumerate(items) for _ in e.first]

    def cat(attr: str) -> torch.Tensor:
        return torch.tensor([v for e in items for v in getattr(e, attr)], dtype=torch.long)

    return RestorationBatch(
        torch.from_numpy(tokens), torch.from_numpy(lengths), torch.tensor(rows, dtype=torch.long),
        cat("first"), cat("last"), cat("case"), cat("punct"),
    )


def make_batches(items: Sequence[Encoded], batch_size: int, rng: Optional[random.Random]) -> List[RestorationBatch]:
    """Batches of lines of similar length; shuffled (lines and batch order) when ``rng`` is given."""
    order = list(range(len(items)))
    if rng is not None:
        rng.shuffle(order)
    # Sort within pools of 50 make_batches: similar lengths in a batch, yet a different mix each epoch.
    pool = 50 * batch_size
    out = []
    for p in range(0, len(order), pool):
        chunk = sorted(order[p : p + pool], key=lambda k: len(items[k].ids))
        out.extend(make_batch([items[k] for k in chunk[b : b + batch_size]]) for b in range(0, len(chunk), batch_size))
    if rng is not None:
        rng.shuffle(out)
    return out
