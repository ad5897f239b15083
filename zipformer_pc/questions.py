"""Which sentence ends of a P transcript are questions, read from the words.

The shipped transducers end nearly every question with a full stop: the
synthetic voices barely mark the sentence type in the audio, and the
predictor sees two tokens, not the sentence (docs/decoding-extras.md, "Why
the transducer rarely writes question marks").  The
words usually say it (``can you``, ``what do``, ``, is it not``), so a small
text classifier decides, for each sentence the P output ends with ``.``,
whether it is a question, and writes ``?`` instead.  A ``?`` the transducer
wrote stays: it heard one.

The classifier is a logistic regression over sparse features of the
sentence's normalized words (``zipformer_pc.text``: lowercase, hyphens
split) and its commas: the first and last one to three words, the length,
every word and word pair, and the first words of each comma clause (a
question often starts after an address or an aside: ``But, my dear, what
...``).  Version 2 adds the word classes of those places (an auxiliary verb,
a wh-word, a pronoun: ``AUX PRON`` starts ``did you ...`` and ``must she
...`` alike, whatever the verb) and the words of a short last clause with
its classes (a tag: ``..., are you not``), which a corpus of a few thousand
questions does not teach word by word; a version 1 file has no weights for
them and scores as it did.  ``local/train_questions.py`` trains it on the P
references of a training corpus and picks the probability threshold that
makes the fewest errors on the dev references; it is stored as gzipped JSON
(``questions.json.gz``), torch-free like the rest of the runtime.

One rewrite, :meth:`QuestionModel.rewrite_pieces`, serves every place
that shows P: the runtime's text, word and token times
(``zipformer_pc.runtime.recognizer``), decoding (``--questions``) and
plain text (:meth:`QuestionModel.rewrite_text`).  Only the mark changes:
the search, its predictor context and the words are untouched.
"""

import gzip
import json
import math
import random
from collections import Counter
from functools import lru_cache
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from zipformer_pc.files import text_writer
from zipformer_pc.text import WORD_START, normalized, words_and_marks

FORMAT = "zipformer-pc question model"
VERSION = 2
READS_VERSIONS = (1, 2)  # version 1: without the word-class features (no weights for them)
FILE_NAME = "questions.json.gz"
_COMMA = ","


def sentence_tokens(pairs: Sequence[Tuple[str, str]]) -> List[str]:
    """A sentence's ``(word, mark)`` pairs as the classifier reads them: the
    normalized words, with ``,`` after each word a comma follows."""
    out: List[str] = []
    for word, mark in pairs:
        out.extend(normalized(word).split())
        if mark == _COMMA:
            out.append(_COMMA)
    return out


def sentences(text: str) -> Iterable[Tuple[List[str], str]]:
    """The sentences of a P text that end with ``.`` or ``?``: ``(tokens, mark)``
    (:func:`sentence_tokens`); words after the last such mark are left out."""
    pairs: List[Tuple[str, str]] = []
    for word, mark in words_and_marks(text):
        pairs.append((word, mark))
        if mark in (".", "?"):
            yield sentence_tokens(pairs), mark
            pairs = []


#: the word classes of the version 2 features (normalized words: lowercase, apostrophes kept)
AUXILIARIES = frozenset(
    "do does did don't doesn't didn't is isn't are aren't was wasn't were weren't am have has had haven't hasn't "
    "hadn't can can't could couldn't will won't would wouldn't shall shan't should shouldn't may might must "
    "mustn't need dare ought".split())
WH_WORDS = frozenset("who whom whose what which when where why how".split())
PRONOUNS = frozenset("i you he she it we they there this that one anybody anything any".split())
#: a last clause of at most this many words is also read as a tag (``, are you not``)
TAG_WORDS = 4


def word_class(word: str) -> str:
    """``AUX``, ``WH``, ``PRON`` or ``W`` (any other word)."""
    if word in AUXILIARIES:
        return "AUX"
    if word in WH_WORDS:
        return "WH"
    return "PRON" if word in PRONOUNS else "W"


def _sigmoid(z: float) -> float:
    return 1.0 / (1.0 + math.exp(-max(-30.0, min(30.0, z))))


def features(tokens: Sequence[str]) -> List[str]:
    """The sparse features of one sentence (see the module docstring)."""
    words = [t for t in tokens if t != _COMMA]
    if not words:
        return []
    feats = [f"n={min(len(words), 8)}"]
    for k in (1, 2, 3):
        if len(words) >= k:
            feats.append(f"f{k}=" + " ".join(words[:k]))
            feats.append(f"l{k}=" + " ".join(words[-k:]))
    feats.extend(f"u={w}" for w in sorted(set(words)))
    feats.extend(f"b={a} {b}" for a, b in zip(words, words[1:]))
    clauses: List[List[str]] = [[]]
    for t in tokens:
        if t == _COMMA:
            clauses.append([])
        else:
            clauses[-1].append(t)
    clauses = [c for c in clauses if c]
    for c in clauses[1:]:
        feats.append(f"c1={c[0]}")
        if len(c) > 1:
            feats.append(f"c2={c[0]} {c[1]}")
    last = clauses[-1]
    feats.append(f"lc1={last[0]}")
    if len(last) > 1:
        feats.append(f"lc2={last[0]} {last[1]}")
    # version 2: word classes where a question shows
    starts = [" ".join(word_class(w) for w in c[:2]) for c in clauses]
    for i, s in enumerate(starts):
        feats.append(f"cc={s}")
        if i == 0:
            feats.append(f"fc={s}")
    feats.append(f"lcc={starts[-1]}")
    if len(last) <= TAG_WORDS:
        feats.append("tag=" + " ".join(w if k == "W" else k for w, k in zip(last, map(word_class, last))))
    feats.append("lwc=" + " ".join(word_class(w) for w in words[-3:]))
    return feats


class QuestionModel:
    """``P(question | sentence)`` by logistic regression; ``?`` from ``threshold`` up."""

    def __init__(self, weights: Dict[str, float], bias: float, threshold: float = 0.5,
                 info: Optional[Dict[str, object]] = None) -> None:
        if not 0.0 < threshold < 1.0:
            raise ValueError(f"threshold must be between 0 and 1 (exclusive), got {threshold}")
        self.weights = dict(weights)
        self.bias = float(bias)
        self.threshold = float(threshold)
        self.info = dict(info or {})
        self._decide = lru_cache(maxsize=4096)(self._is_question)

    def probability(self, tokens: Sequence[str]) -> float:
        """``P(question)`` of one sentence's tokens (:func:`sentence_tokens`)."""
        z = self.bias + sum(self.weights.get(f, 0.0) for f in features(tokens))
        return _sigmoid(z)

    def _is_question(self, tokens: Tuple[str, ...], threshold: float) -> bool:
        return bool(tokens) and self.probability(tokens) >= threshold

    def is_question(self, tokens: Sequence[str]) -> bool:
        return self._decide(tuple(tokens), self.threshold)  # cached per sentence (streaming repeats them)

    def rewrite_pieces(self, pieces: Sequence[str]) -> List[str]:
        """``pieces`` (sentencepiece pieces, or the characters of a text) with the
        ``.`` that ends a question sentence turned into ``?``; nothing else changes.

        A sentence ends at a piece whose text ends a word with ``.`` or ``?``
        (as :func:`zipformer_pc.text.words_and_marks` resolves the marks);
        its words are those since the previous sentence end.
        """
        out = list(pieces)
        start = 0
        for i, piece in enumerate(pieces):
            if not piece or piece[-1] not in ".?":
                continue
            pairs = words_and_marks("".join(pieces[start : i + 1]).replace(WORD_START, " "))
            if not pairs or pairs[-1][1] not in (".", "?"):
                continue
            if pairs[-1][1] == "." and self.is_question(sentence_tokens(pairs)):
                out[i] = piece[:-1] + "?"
            start = i + 1
        return out

    def rewrite_text(self, text: str) -> str:
        """A P text with the ``.`` of its question sentences turned into ``?``."""
        return "".join(self.rewrite_pieces(list(text)))

    # ---- storage --------------------------------------------------------------------------

    def to_dict(self) -> Dict[str, object]:
        return {"format": FORMAT, "version": VERSION, "threshold": self.threshold, "bias": self.bias,
                "info": self.info, "weights": self.weights}

    def save(self, path) -> None:
        with text_writer(path) as f:
            json.dump(self.to_dict(), f, sort_keys=True, separators=(",", ":"))
            f.write("\n")

    @classmethod
    def load(cls, path) -> "QuestionModel":
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no such question model (local/train_questions.py writes one)")
        opener = gzip.open if path.name.endswith(".gz") else open
        try:
            with opener(path, "rt", encoding="utf-8") as f:
                d = json.load(f)
        except (OSError, ValueError) as e:
            raise ValueError(f"{path}: not a question model ({e})") from None
        if not isinstance(d, dict) or d.get("format") != FORMAT:
            raise ValueError(f"{path}: not a question model (no format {FORMAT!r}; local/train_questions.py writes one)")
        if d.get("version") not in READS_VERSIONS:
            raise ValueError(f"{path}: question model version {d.get('version')}, this code reads "
                             f"{', '.join(map(str, READS_VERSIONS))}")
        return cls(d["weights"], d["bias"], d["threshold"], d.get("info"))


def find_questions(model_dir) -> Optional[Path]:
    """The question model of a model dir (``questions.json.gz``), if it has one."""
    path = Path(model_dir) / FILE_NAME
    return path if path.is_file() else None


def train(examples: Sequence[Tuple[List[str], str]], epochs: int = 30, l2: float = 1e-2, rate: float = 0.5,
          min_count: int = 2, prune: float = 0.05, seed: int = 42) -> QuestionModel:
    """Logistic regression (AdaGrad, L2) on ``(tokens, mark)`` sentences.

    Features seen in fewer than ``min_count`` sentences are left out, and
    weights smaller than ``prune`` in magnitude dropped after training (they
    barely move a decision and make most of the file).  Deterministic for a
    ``seed``.
    """
    if not examples:
        raise ValueError("no sentences ending with . or ? to train the question model on")
    counts = Counter(f for tokens, _ in examples for f in set(features(tokens)))
    data = [([f for f in features(tokens) if counts[f] >= min_count], 1.0 if mark == "?" else 0.0)
            for tokens, mark in examples]
    weights: Dict[str, float] = {}
    squares: Dict[str, float] = {}
    bias, bias_square = 0.0, 1e-8
    rng = random.Random(seed)
    for _ in range(epochs):
        rng.shuffle(data)
        for feats, y in data:
            z = bias + sum(weights.get(f, 0.0) for f in feats)
            g = _sigmoid(z) - y
            bias_square += g * g
            bias -= rate * g / math.sqrt(bias_square)
            for f in feats:
                w = weights.get(f, 0.0)
                gf = g + l2 * w
                squares[f] = squares.get(f, 1e-8) + gf * gf
                weights[f] = w - rate * gf / math.sqrt(squares[f])
    kept = {f: round(w, 3) for f, w in sorted(weights.items()) if abs(w) >= prune}
    questions = sum(1 for _, m in examples if m == "?")
    return QuestionModel(kept, round(bias, 4), 0.5, {"sentences": len(examples), "questions": questions})


def decision_counts(model: QuestionModel, examples: Sequence[Tuple[List[str], str]],
                    threshold: Optional[float] = None) -> Dict[str, int]:
    """``tp``, ``fp``, ``fn``, ``tn`` of the question decision on ``(tokens, mark)`` sentences."""
    t = model.threshold if threshold is None else threshold
    c = {"tp": 0, "fp": 0, "fn": 0, "tn": 0}
    for tokens, mark in examples:
        said = model.probability(tokens) >= t
        c[("tp" if mark == "?" else "fp") if said else ("fn" if mark == "?" else "tn")] += 1
    return c


def tune_threshold(model: QuestionModel, examples: Sequence[Tuple[List[str], str]],
                   grid: Sequence[float] = tuple(k / 20 for k in range(2, 19))) -> float:
    """The threshold of ``grid`` with the fewest wrong marks (``fp + fn``) on
    ``examples`` (the highest of equals: fewer ``?`` where unsure); 0.5
    when ``examples`` has no question."""
    if not any(m == "?" for _, m in examples):
        return 0.5
    def errors(t: float) -> int:
        c = decision_counts(model, examples, t)
        return c["fp"] + c["fn"]
    return min(sorted(grid, reverse=True), key=errors)
