"""How late streaming output arrives and how often it is revised.

:func:`trace` feeds one utterance to a :class:`StreamingRecognizer` in pieces
(as a microphone would) and records what a caption display shows after every
decoding call: the words of each mode, the seconds of audio fed so far and
the wall time the call took.  :func:`analyse` compares those snapshots with
the final transcript:

* **word delay**: for each final word, the audio time at which it was shown
  in its final form for good, minus the end of the word in the final
  hypothesis (the end of the encoder frame of its last piece, marks
  excluded; at most the end of the audio: a word whose last piece comes in a
  frame of the silent tail padding ended with the speech).  It is the delay
  streaming adds: waiting for the chunk and its right context, plus, for
  ``real-time`` figures, the compute time of the call that showed the word
  (as when audio arrives in real time and the recognizer keeps up).  The
  transducer's own emission delay relative to the acoustic end of a word is
  not included: the synthetic corpus has no forced alignment.
* **mark delay**: for each punctuation mark of P, the audio time at which it
  was shown, minus the end of the word it follows (marks excluded): how much
  later than its word a comma or full stop arrives.
* **revisions**: a shown word whose letters or case later change other than
  by growing is one revision; a shown word that grows because it was shown
  before its last piece arrived ("hel" -> "hello") is one **extension**;
  both are given per final word.  Greedy search never takes a token back, so
  it makes extensions only.  A mark that is shown and later changes other
  than by growing is counted apart (``mark_revisions``); marks arriving after
  their word are neither.

Only the recognizer's public interface is used (``accept_waveform``,
``decode_stream``, ``get_result``/``current_segment``, ``finish``); torch-free.
"""

import time
from dataclasses import dataclass, field
from typing import Dict, List, Sequence

import numpy as np

from zipformer_pc.runtime.timestamps import is_mark, word_times
from zipformer_pc.text import strip_marks


@dataclass
class Snapshot:
    fed: float  # seconds of audio given to the stream so far (padding excluded)
    compute: float  # wall seconds of the decoding call that produced this view
    words: Dict[str, List[str]]  # mode -> displayed words (finished segments + the current one)


@dataclass
class Trace:
    duration: float
    snapshots: List[Snapshot]
    final_words: Dict[str, List[str]]  # mode -> final words (with marks for P)
    word_ends: Dict[str, List[float]]  # mode -> end of each final word, marks excluded (seconds)
    marks: Dict[str, List[int]] = field(default_factory=dict)  # mode -> final word index of each mark


def _displayed(rec, s) -> Dict[str, List[str]]:
    """The words shown per mode: the finished segments' text, then the current hypotheses'."""
    texts = [seg.text for seg in s.segments] + [rec.get_result(s)]
    return {m: " ".join(t.get(m, "") for t in texts).split() for m in s.hyps}


def _final_word_ends(tokens: Sequence, frame_seconds: float) -> List[float]:
    """End of each word of a segment, marks skipped, from its timed tokens."""
    kept = [t for t in tokens if not is_mark(t.token)]
    frames = [int(round(t.start / frame_seconds)) for t in kept]
    return [w.end for w in word_times([t.token for t in kept], frames, frame_seconds)]


def trace(rec, samples: np.ndarray, sample_rate: int, piece_seconds: float = 0.1) -> Trace:
    """Stream ``samples`` in pieces of ``piece_seconds`` and record every change of the display."""
    s = rec.create_stream()
    step = max(1, int(piece_seconds * sample_rate))
    snaps: List[Snapshot] = []
    fed = 0
    for i in range(0, len(samples), step):
        piece = samples[i : i + step]
        s.accept_waveform(sample_rate, piece)
        fed += len(piece)
        t0 = time.perf_counter()
        ran = rec.decode_stream(s)
        if ran:
            snaps.append(Snapshot(fed / sample_rate, time.perf_counter() - t0, _displayed(rec, s)))
    s.input_finished()
    t0 = time.perf_counter()
    segments = rec.finish(s)
    snaps.append(Snapshot(fed / sample_rate, time.perf_counter() - t0, _displayed(rec, s)))
    final = snaps[-1].words
    ends: Dict[str, List[float]] = {}
    for m in s.hyps:
        ends[m] = [min(e, fed / sample_rate) for seg in segments
                   for e in _final_word_ends(seg.tokens.get(m, []), rec.frame_seconds)]
        if len(ends[m]) != len([w for w in final[m] if strip_marks(w)]):
            raise AssertionError(f"mode {m}: {len(ends[m])} timed words for {final[m]}")
    return Trace(fed / sample_rate, snaps, final, ends)


def _settled(snaps: Sequence[Snapshot], mode: str, index: int, form: str, key) -> int:
    """First snapshot from which word ``index`` is shown as ``form`` (after ``key``) until the end."""
    k = len(snaps) - 1
    while k > 0:
        words = snaps[k - 1].words.get(mode, [])
        if len(words) <= index or key(words[index]) != form:
            break
        k -= 1
    return k


def analyse(tr: Trace) -> Dict[str, Dict[str, object]]:
    """Per mode: word delays, mark delays (offline / real-time, seconds) and revision counts."""
    out: Dict[str, Dict[str, object]] = {}
    for m, final in tr.final_words.items():
        delays, delays_rt, mark_delays, mark_delays_rt = [], [], [], []
        wi = -1  # index among words that are not marks alone
        for i, w in enumerate(final):
            bare = strip_marks(w)
            if not bare:
                continue
            wi += 1
            end = tr.word_ends[m][wi]
            k = _settled(tr.snapshots, m, i, bare, strip_marks)
            delays.append(tr.snapshots[k].fed - end)
            delays_rt.append(tr.snapshots[k].fed + tr.snapshots[k].compute - end)
            if bare != w:
                k = _settled(tr.snapshots, m, i, w, lambda x: x)
                mark_delays.append(tr.snapshots[k].fed - end)
                mark_delays_rt.append(tr.snapshots[k].fed + tr.snapshots[k].compute - end)
        extensions = revisions = mark_revisions = 0
        for prev, cur in zip(tr.snapshots, tr.snapshots[1:]):
            a, b = prev.words.get(m, []), cur.words.get(m, [])
            for i, w in enumerate(a):
                was, now = strip_marks(w), strip_marks(b[i]) if i < len(b) else None
                if now is None or not now.startswith(was):
                    revisions += 1
                elif now != was:
                    extensions += 1
                elif was and not b[i].startswith(w):
                    mark_revisions += 1
        out[m] = dict(words=sum(1 for w in final if strip_marks(w)), delays=delays, delays_rt=delays_rt,
                      mark_delays=mark_delays, mark_delays_rt=mark_delays_rt, extensions=extensions,
                      revisions=revisions, mark_revisions=mark_revisions)
    return out


def summarize(per_utt: Sequence[Dict[str, Dict[str, object]]]) -> Dict[str, Dict[str, float]]:
    """Pool :func:`analyse` results: mean / p50 / p90 of delays (ms), revisions per word."""
    out: Dict[str, Dict[str, float]] = {}
    modes = sorted({m for a in per_utt for m in a})
    for m in modes:
        pooled = {k: [] for k in ("delays", "delays_rt", "mark_delays", "mark_delays_rt")}
        words = extensions = revisions = mark_revisions = 0
        for a in per_utt:
            if m not in a:
                continue
            for k in pooled:
                pooled[k].extend(a[m][k])
            words += a[m]["words"]
            extensions += a[m]["extensions"]
            revisions += a[m]["revisions"]
            mark_revisions += a[m]["mark_revisions"]
        row: Dict[str, float] = {"words": words, "marks": len(pooled["mark_delays"])}
        for k, xs in pooled.items():
            x = np.asarray(xs, dtype=np.float64) * 1000.0
            row[f"{k}_mean_ms"] = float(x.mean()) if x.size else float("nan")
            row[f"{k}_p50_ms"] = float(np.percentile(x, 50)) if x.size else float("nan")
            row[f"{k}_p90_ms"] = float(np.percentile(x, 90)) if x.size else float("nan")
        row["extensions_per_word"] = extensions / words if words else float("nan")
        row["revisions_per_word"] = revisions / words if words else float("nan")
        row["mark_revisions"] = mark_revisions
        out[m] = row
    return out
