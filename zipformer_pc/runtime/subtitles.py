"""Subtitles (SRT, WebVTT) and a per-input JSON document of the runtime's segments.

The cues come from the endpointed segments of one input
(:meth:`~zipformer_pc.runtime.recognizer.StreamingRecognizer.recognize_segments`)
and their word timestamps (:mod:`zipformer_pc.runtime.timestamps`): a
segment is cut into cues at word boundaries so that a cue fits
``max_lines`` lines of at most ``max_line_chars`` characters and lasts at
most ``max_cue_seconds``.  When a cue has to end before a segment does, it
ends after the last mark that leaves it at least a third of a line long (a
sentence's end before a comma, a comma before no mark), else as full as it
fits.  Its two lines break where they are most even, a break after a mark
counting half a line better.  A cue runs from the start of its first
word to the end of its last; cues are in order, never overlap and end
within the audio (a word the streaming model emitted in the tail silence
after the audio is pulled back into it, and a word that a late mark made
longer than a cue may last is cut short).  A word longer than a line is
kept whole on a line of its own.

Joined with spaces, the cues' texts are the segments' texts: nothing is
dropped or added but the line breaks.
"""

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple, Union

from zipformer_pc.runtime.timestamps import TimedWord

FORMATS = ("tsv", "srt", "vtt", "json")
SUBTITLE_FORMATS = ("srt", "vtt")
DEFAULT_MAX_LINE_CHARS = 42
DEFAULT_MAX_CUE_SECONDS = 6.0
MAX_LINES = 2
SENTENCE_END = (".", "?", "!")
OTHER_MARKS = (",", ";", ":", "--", "...")


@dataclass(frozen=True)
class Cue:
    """One subtitle: its lines and its times in milliseconds."""

    start_ms: int
    end_ms: int
    lines: Tuple[str, ...]

    @property
    def text(self) -> str:
        return " ".join(self.lines)


def _mark_weight(word: str) -> int:
    """2 after a sentence's end, 1 after another mark, 0 after none."""
    if word.endswith(SENTENCE_END):
        return 2
    return 1 if word.endswith(OTHER_MARKS) else 0


def layout(words: Sequence[str], max_line_chars: int, max_lines: int = MAX_LINES) -> Optional[List[str]]:
    """The words as at most ``max_lines`` (1 or 2) lines of at most ``max_line_chars`` characters,
    or None when they do not fit; two lines break where they are most even, a break after a mark
    counting ``max_line_chars // 2`` characters of unevenness less."""
    one = " ".join(words)
    if len(one) <= max_line_chars:
        return [one]
    if max_lines < 2:
        return None
    best: Optional[Tuple[int, int]] = None
    for k in range(1, len(words)):
        first, second = " ".join(words[:k]), " ".join(words[k:])
        if len(first) > max_line_chars or len(second) > max_line_chars:
            continue
        cost = abs(len(first) - len(second)) - (max_line_chars // 2 if _mark_weight(words[k - 1]) else 0)
        if best is None or cost < best[0]:
            best = (cost, k)
    if best is None:
        return None
    k = best[1]
    return [" ".join(words[:k]), " ".join(words[k:])]


def _lines(words: Sequence[TimedWord], max_line_chars: int, max_lines: int) -> List[str]:
    """The lines of a cue's words: :func:`layout`, or for a word too long for a line, that word on
    a line of its own (and the others laid out around it)."""
    texts = [w.word for w in words]
    got = layout(texts, max_line_chars, max_lines)
    return got if got is not None else texts  # only a single over-long word gets here


def split_segment(words: Sequence[TimedWord], max_line_chars: int = DEFAULT_MAX_LINE_CHARS,
                  max_cue_seconds: float = DEFAULT_MAX_CUE_SECONDS,
                  max_lines: int = MAX_LINES) -> List[List[TimedWord]]:
    """One segment's words cut into cues (lists of consecutive words; see the module's doc)."""
    if max_line_chars < 1 or max_cue_seconds <= 0 or max_lines not in (1, 2):
        raise ValueError(f"bad cue limits: {max_line_chars} characters, {max_cue_seconds} s, {max_lines} lines")
    min_chars = max_line_chars // 3

    def fits(ws: Sequence[TimedWord]) -> bool:
        return (ws[-1].end - ws[0].start <= max_cue_seconds + 1e-9
                and layout([w.word for w in ws], max_line_chars, max_lines) is not None)

    def cut(ws: Sequence[TimedWord]) -> int:
        """How many of ``ws`` (which fit in one cue) to keep when the next word does not fit."""
        best_k, best_w = len(ws), 0
        for k in range(len(ws) - 1, 0, -1):  # the latest break of the highest weight
            w = _mark_weight(ws[k - 1].word)
            if w > best_w and len(" ".join(x.word for x in ws[:k])) >= min_chars:
                best_k, best_w = k, w
        if _mark_weight(ws[-1].word) >= best_w:
            return len(ws)
        return best_k

    cues: List[List[TimedWord]] = []
    cur: List[TimedWord] = []
    for w in words:
        cur.append(w)
        while len(cur) > 1 and not fits(cur):
            k = cut(cur[:-1])
            cues.append(cur[:k])
            cur = cur[k:]
        if not fits(cur):  # one word alone that fits no cue: a cue of its own
            cues.append(cur)
            cur = []
    if cur:
        cues.append(cur)
    return cues


def cue_mode(segments) -> str:
    """The mode the subtitles show: P when the segments have P words, else N."""
    return "P" if any("P" in seg.words for seg in segments) else "N"


def make_cues(segments, duration: float, mode: Optional[str] = None,
              max_line_chars: int = DEFAULT_MAX_LINE_CHARS, max_cue_seconds: float = DEFAULT_MAX_CUE_SECONDS,
              max_lines: int = MAX_LINES) -> List[Cue]:
    """The cues of one input's segments (``Segment`` objects, in order) in ``mode`` (default:
    :func:`cue_mode`), timed within ``[0, duration]`` seconds."""
    mode = mode or cue_mode(segments)
    groups: List[List[TimedWord]] = []
    for seg in segments:
        groups += split_segment(seg.words.get(mode, []), max_line_chars, max_cue_seconds, max_lines)
    end_of_audio = max(int(round(duration * 1000)), len(groups))
    # a cue lasts max_cue_seconds at most, even a word alone made longer by a mark that came late
    spans = [[int(round(g[0].start * 1000)), int(round(min(g[-1].end, g[0].start + max_cue_seconds) * 1000))]
             for g in groups]
    # from the last cue back: within the audio, each before the next, each at least 1 ms long
    limit = end_of_audio
    for span in reversed(spans):
        span[1] = min(span[1], limit)
        span[0] = min(span[0], span[1] - 1)
        limit = span[0]
    prev_end = 0
    for span in spans:  # never before 0 or the cue before (word times only ever go forward)
        span[0] = max(span[0], prev_end)
        span[1] = max(span[1], span[0] + 1)
        prev_end = span[1]
    return [Cue(s, e, tuple(_lines(g, max_line_chars, max_lines))) for g, (s, e) in zip(groups, spans)]


def timestamp(ms: int, decimal: str) -> str:
    """``HH:MM:SS,mmm`` (SRT, ``decimal=","``) or ``HH:MM:SS.mmm`` (WebVTT)."""
    hours, rest = divmod(ms, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    seconds, millis = divmod(rest, 1000)
    return f"{hours:02d}:{minutes:02d}:{seconds:02d}{decimal}{millis:03d}"


def to_srt(cues: Sequence[Cue]) -> str:
    """SubRip: numbered cues from 1, ``-->`` between the times, a blank line after each."""
    blocks = [f"{i}\n{timestamp(c.start_ms, ',')} --> {timestamp(c.end_ms, ',')}\n" + "\n".join(c.lines) + "\n"
              for i, c in enumerate(cues, 1)]
    return "\n".join(blocks)


def _vtt_escape(line: str) -> str:
    return line.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def to_vtt(cues: Sequence[Cue]) -> str:
    """WebVTT: the ``WEBVTT`` header, then the cues (no identifiers; ``&``, ``<``, ``>`` escaped)."""
    blocks = ["WEBVTT\n"]
    blocks += [f"{timestamp(c.start_ms, '.')} --> {timestamp(c.end_ms, '.')}\n"
               + "\n".join(_vtt_escape(line) for line in c.lines) + "\n" for c in cues]
    return "\n".join(blocks)


def to_json(uid: str, duration: float, segments, transcript: Dict[str, str]) -> str:
    """The input's document: its id, duration, transcript per mode, and its segments with, per mode,
    their text, words (marks attached) and tokens, times in seconds."""
    doc = {"id": uid, "duration": round(duration, 3), "text": dict(transcript),
           "segments": [seg.as_dict(True) for seg in segments]}
    return json.dumps(doc, ensure_ascii=False, indent=1) + "\n"


def render(fmt: str, uid: str, duration: float, segments, transcript: Dict[str, str], mode: Optional[str] = None,
           max_line_chars: int = DEFAULT_MAX_LINE_CHARS, max_cue_seconds: float = DEFAULT_MAX_CUE_SECONDS) -> str:
    """One input's file in ``fmt`` (srt, vtt or json)."""
    if fmt == "json":
        return to_json(uid, duration, segments, transcript)
    if fmt not in SUBTITLE_FORMATS:
        raise ValueError(f"no file format {fmt!r} (one of {', '.join(FORMATS[1:])})")
    cues = make_cues(segments, duration, mode, max_line_chars, max_cue_seconds)
    return to_srt(cues) if fmt == "srt" else to_vtt(cues)


def file_stem(uid: str) -> str:
    """A file name for an input's id: an id that is a path (two inputs shared a name) has its
    folder separators replaced by ``_`` (``a/x`` -> ``a_x``)."""
    stem = uid.replace("\\", "/").strip("/")
    while stem.startswith("./"):
        stem = stem[2:]
    return stem.replace("/", "_") or "_"


def output_paths(uids: Sequence[str], sources: Sequence[Optional[Path]], output: Union[str, Path, None],
                 fmt: str) -> List[Path]:
    """Where each input's ``fmt`` file goes.

    * no ``output``: next to its wav (``talk.wav`` -> ``talk.srt``), as sherpa-onnx's
      ``generate-subtitles.py`` writes them and as video players look for them; an input without
      a file (a cut of ``--cuts``) needs ``output``;
    * ``output`` a folder (it exists as one, is written with a final ``/``, or there are several inputs): one
      ``<id>.<fmt>`` per input in it (made when missing), like Whisper's ``--output_dir``;
    * otherwise (one input): the file ``output``.

    ``ValueError`` with the reason when that cannot be done."""
    ext = "." + fmt
    if output is None:
        missing = [u for u, s in zip(uids, sources) if s is None]
        if missing:
            raise ValueError(f"--format {fmt}: {missing[0]} has no wav to write {file_stem(missing[0])}{ext} next to "
                             "(a cut): give --output DIR")
        paths = [Path(s).with_suffix(ext) for s in sources]
    else:
        as_dir = str(output).endswith(("/", os.sep)) or Path(output).is_dir() or len(uids) > 1
        output = Path(output)
        if not as_dir:
            return [output]
        if output.exists() and not output.is_dir():
            raise ValueError(f"--output {output} is a file, but with {len(uids)} inputs and --format {fmt} it must be "
                             f"a folder (one <id>{ext} per input)")
        if not output.exists() and output.suffix.lower() in tuple("." + f for f in FORMATS):
            raise ValueError(f"--output {output} names a file, but with {len(uids)} inputs and --format {fmt} it must "
                             f"be a folder (one <id>{ext} per input)")
        paths = [output / (file_stem(u) + ext) for u in uids]
    seen: Dict[Path, str] = {}
    for u, p in zip(uids, paths):
        if p in seen:
            raise ValueError(f"--format {fmt}: {seen[p]} and {u} would both be written to {p}")
        seen[p] = u
    return paths
