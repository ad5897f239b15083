"""Token and word timestamps of a greedy streaming hypothesis.

The transducer emits each token on one encoder frame (at most one token per
frame and mode in our greedy search), so a token's time is its frame's start:
``frame * frame_seconds``.  Words are sentencepiece pieces glued together:
a piece starting with ``\u2581`` begins a word, any other piece continues the
current one.  Marks (``,`` ``.`` ``?`` ...) are pieces without ``\u2581``, so
they stay attached to the word before them, and a word's end covers its
mark.  A word spans from its first piece's frame to the end of its last
piece's frame, so no word has zero length and words never overlap or go
backwards in time.
"""

from dataclasses import dataclass
from typing import List, Sequence

from zipformer_pc.text import MARK_CHARS, WORD_START


def is_mark(piece: str) -> bool:
    """A piece made of marks only (after any word-start marker): ``,`` ``?`` ``...``;
    an apostrophe piece belongs to a word."""
    text = piece.lstrip(WORD_START)
    return bool(text) and all(ch in MARK_CHARS for ch in text)


def joined_text(pieces: Sequence[str]) -> str:
    """The text of a hypothesis' pieces: words split at each word start, single spaces."""
    return " ".join("".join(pieces).replace(WORD_START, " ").split())


@dataclass(frozen=True)
class TimedToken:
    token: str
    start: float  # seconds


@dataclass(frozen=True)
class TimedWord:
    word: str
    start: float  # seconds
    end: float  # seconds

    def as_dict(self) -> dict:
        return {"word": self.word, "start": round(self.start, 3), "end": round(self.end, 3)}


def token_times(pieces: Sequence[str], frames: Sequence[int], frame_seconds: float,
                offset: float = 0.0) -> List[TimedToken]:
    """Each piece with the start of the frame that emitted it (plus ``offset`` seconds)."""
    if len(pieces) != len(frames):
        raise ValueError(f"{len(pieces)} tokens but {len(frames)} frames")
    if any(b < a for a, b in zip(frames, frames[1:])):
        raise ValueError("token frames go backwards")
    return [TimedToken(p, offset + f * frame_seconds) for p, f in zip(pieces, frames)]


def word_times(pieces: Sequence[str], frames: Sequence[int], frame_seconds: float,
               offset: float = 0.0) -> List[TimedWord]:
    """Words (with their attached marks) and their [start, end) in seconds."""
    words: List[List] = []  # [text, first frame, last frame]
    for p, f in zip(pieces, frames):
        if p.startswith(WORD_START) or not words:
            text = p.lstrip(WORD_START)
            if not text:  # a bare word-start piece: the word's letters follow
                words.append(["", f, f])
                continue
            if words and not words[-1][0]:  # fill the bare word started before
                words[-1][0] += text
                words[-1][2] = f
                continue
            words.append([text, f, f])
        else:
            words[-1][0] += p
            words[-1][2] = f
    out = []
    for text, first, last in words:
        if not text:
            continue
        if out and is_mark(text):  # marks alone belong to the word before
            prev = out[-1]
            out[-1] = TimedWord(prev.word + text, prev.start, offset + (last + 1) * frame_seconds)
            continue
        out.append(TimedWord(text, offset + first * frame_seconds, offset + (last + 1) * frame_seconds))
    return out
