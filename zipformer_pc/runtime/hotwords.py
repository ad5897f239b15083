"""Hotwords: phrases modified beam search favours (contextual biasing), per output mode.

A hotword list has one phrase a line, written as it should appear in P
(``Queequeg``, ``Captain Ahab``), optionally followed by its own bonus per
token after a colon (``Queequeg :2.5``; without one, the list's default,
``--hotwords-score``).  Empty lines and lines starting with ``#`` are
skipped.  Each searched mode gets the phrase in its own form:

* P: the phrase by P's text rules (``zipformer_pc.text.punctuated``: case
  kept, only the marks P writes);
* N: its normalized form (``zipformer_pc.text.normalized``: ``Moby-Dick`` ->
  ``moby dick``);

and then the pieces the model writes it with: the model dir's ``bpe.model``
(sentencepiece) when it has one, else the fewest pieces of ``tokens.txt``
that spell it.  Each mode's phrases make one
:class:`~zipformer_pc.runtime.context_graph.ContextGraph`, which matches
them as whole words: a phrase counts when the token after it starts a word,
is a mark or an apostrophe (``Queequeg's``), or the segment ends.
"""

import logging
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Tuple, Union

from zipformer_pc.runtime.context_graph import ContextGraph
from zipformer_pc.runtime.timestamps import is_mark
from zipformer_pc.text import WORD_START, normalized, punctuated

_log = logging.getLogger(__name__)

DEFAULT_HOTWORDS_SCORE = 1.5  # bonus per token, as sherpa-onnx's --hotwords-score
MAX_SCORE = 100.0


@dataclass(frozen=True)
class Hotword:
    phrase: str  # as written: the P form comes from it
    score: Optional[float] = None  # bonus per token; None: the list's default


HotwordLike = Union[str, Hotword, Tuple[str, float]]


_SCORED = re.compile(r"^(?P<phrase>.*?\S)\s+:(?P<score>\S*)$")


def parse_hotword(line: str) -> Hotword:
    """``Queequeg`` or ``Queequeg :2.5``: the phrase, then optionally a space, ``:`` and its bonus per token."""
    text, score = line.strip(), None
    m = _SCORED.match(text)
    if m:
        try:
            score = float(m.group("score"))
        except ValueError:
            raise ValueError(f"hotword {text!r}: the bonus after ' :' must be a number, got {m.group('score')!r}") \
                from None
        text = m.group("phrase")
    if not text:
        raise ValueError(f"an empty hotword ({line!r})")
    if score is not None and not (math.isfinite(score) and 0 < score <= MAX_SCORE):
        raise ValueError(f"hotword {text!r}: its bonus per token must be above 0 and at most {MAX_SCORE:g}, "
                         f"got {score:g}")
    return Hotword(text, score)


def as_hotwords(items: Iterable[HotwordLike]) -> List[Hotword]:
    """Strings (:func:`parse_hotword`), ``(phrase, score)`` pairs or :class:`Hotword` objects."""
    out = []
    for item in items:
        if isinstance(item, Hotword):
            out.append(item)
        elif isinstance(item, str):
            out.append(parse_hotword(item))
        elif isinstance(item, (tuple, list)) and len(item) == 2 and isinstance(item[0], str):
            out.append(parse_hotword(f"{item[0]} :{float(item[1])!r}"))
        else:
            raise ValueError(f"a hotword must be a string or a (phrase, score) pair, got {item!r}")
    return out


def read_hotwords(path) -> List[Hotword]:
    """The hotwords of a file: one a line, ``#`` comments and empty lines skipped."""
    out = []
    for n, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            out.append(parse_hotword(line))
        except ValueError as e:
            raise ValueError(f"{path}:{n}: {e}") from None
    return out


def mode_form(phrase: str, mode: str) -> str:
    """The phrase as ``mode`` writes it: P by P's rules, N normalized."""
    if mode == "P":
        return punctuated(phrase)
    if mode == "N":
        return normalized(phrase)
    raise ValueError(f"no hotword form for mode {mode!r}")


class PieceEncoder:
    """Text to the model's token ids: with ``bpe_model`` (sentencepiece), as the model was trained;
    without one, the fewest pieces of ``tokens`` (the longest last piece on a tie)."""

    def __init__(self, tokens: Sequence[str], bpe_model: Optional[Path] = None) -> None:
        self.tokens = list(tokens)
        self.ids = {t: i for i, t in enumerate(self.tokens)}
        self.sp = None
        if bpe_model is not None:
            try:
                import sentencepiece as spm
            except ImportError:
                _log.warning("sentencepiece is not installed: hotwords are spelt with the fewest pieces of "
                             "tokens.txt instead of %s", bpe_model)
            else:
                self.sp = spm.SentencePieceProcessor(model_file=str(bpe_model))
        self.pieces = {t for t in self.tokens if not (t.startswith("<") and t.endswith(">"))}
        self.longest = max((len(t) for t in self.pieces), default=1)
        # the tokens that end the word before them: a word start, a mark, an apostrophe ('s, 'll)
        self.boundary = [t in self.pieces and (t.startswith((WORD_START, "'")) or is_mark(t)) for t in self.tokens]

    @property
    def method(self) -> str:
        return "sentencepiece" if self.sp is not None else "fewest pieces of tokens.txt"

    def encode(self, text: str) -> List[int]:
        """The token ids of ``text``; ``ValueError`` when the tokens cannot write it."""
        if self.sp is not None:
            pieces = self.sp.encode(text, out_type=str)
            missing = [p for p in pieces if p not in self.ids or p == "<unk>"]
            if missing:
                raise ValueError(f"{text!r} has characters the model cannot write ({' '.join(missing)})")
            return [self.ids[p] for p in pieces]
        s = "".join(WORD_START + w for w in text.split())
        best: List[Optional[Tuple[int, int]]] = [(0, 0)] + [None] * len(s)  # (pieces, length of the last)
        for end in range(1, len(s) + 1):
            for size in range(min(self.longest, end), 0, -1):
                prev = best[end - size]
                if prev is not None and s[end - size:end] in self.pieces:
                    cand = (prev[0] + 1, size)
                    if best[end] is None or cand[0] < best[end][0]:
                        best[end] = cand
        if not s or best[len(s)] is None:
            raise ValueError(f"{text!r} cannot be written with the model's tokens")
        out, end = [], len(s)
        while end > 0:
            size = best[end][1]
            out.append(self.ids[s[end - size:end]])
            end -= size
        return out[::-1]


def build_graphs(hotwords: Sequence[Hotword], modes: Sequence[str], encoder: PieceEncoder, default_score: float,
                 vocab_size: int) -> Dict[str, ContextGraph]:
    """One context graph per mode of the hotwords in that mode's form (none for an empty list)."""
    if not (math.isfinite(default_score) and 0 < default_score <= MAX_SCORE):
        raise ValueError(f"the hotword bonus per token must be above 0 and at most {MAX_SCORE:g}, got {default_score}")
    if not hotwords:
        return {}
    graphs = {}
    for mode in modes:
        phrases = []
        for hw in hotwords:
            form = mode_form(hw.phrase, mode)
            if not form:
                raise ValueError(f"hotword {hw.phrase!r} has no words in mode {mode}")
            try:
                ids = encoder.encode(form)
            except ValueError as e:
                raise ValueError(f"hotword {hw.phrase!r} in mode {mode}: {e}") from None
            phrases.append((ids, hw.score if hw.score is not None else default_score, form))
        graphs[mode] = ContextGraph(phrases, vocab_size, encoder.boundary)
    return graphs
