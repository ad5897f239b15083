"""Decode a list of utterances (wav files or lhotse cuts) with the streaming runtime and score them.

Shared by the command line (:mod:`zipformer_pc.runtime.cli`) and the benchmarks
that decode sets of cuts (``research/ood_factors.py``).  lhotse is imported
only by :func:`from_cuts` and the metrics only by :func:`score`, so the
runtime's light import path stays as it is.
"""

import dataclasses
import functools
import logging
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np

from zipformer_pc.runtime.audio import read_wav, utterance_ids

if TYPE_CHECKING:
    from zipformer_pc.metrics import CorpusScore


@dataclass
class Utterance:
    """One input: how to read its audio and, for cuts, its speaker and references."""

    uid: str
    load: Callable[[], Tuple[np.ndarray, int]]  # -> (float32 samples, sample rate)
    speaker: Optional[str] = None
    ref_n: Optional[str] = None
    ref_p: Optional[str] = None  # None: the utterance has no P reference
    path: Optional[Path] = None  # the wav it was read from (None for a cut)


@dataclass
class Decoded:
    utt: Utterance
    hyps: Dict[str, str]  # mode -> text
    segments: list = field(default_factory=list)
    duration: float = 0.0  # seconds of audio


def from_wavs(paths: Iterable[Path]) -> List[Utterance]:
    """The wavs as utterances, named by :func:`~zipformer_pc.runtime.audio.utterance_ids`."""
    paths = list(paths)
    return [Utterance(uid, lambda p=p: read_wav(str(p)), path=p) for uid, p in zip(utterance_ids(paths), paths)]


def from_cuts(path, limit: int = 0) -> List[Utterance]:
    """The cuts of a manifest (the first ``limit``; 0: all) with their N and P references."""
    from lhotse import load_manifest_lazy

    out = []
    for cut in load_manifest_lazy(path):
        if 0 < limit <= len(out):
            break
        sup = cut.supervisions[0] if cut.supervisions else None
        load = (lambda c=cut: (c.load_audio()[0].astype(np.float32), int(c.sampling_rate)))
        if sup is None:
            out.append(Utterance(cut.id, load))
        else:
            out.append(Utterance(cut.id, load, sup.speaker, sup.text or "", (sup.custom or {}).get("text_p")))
    return out


@dataclass
class DecodeRun:
    decoded: List[Decoded]
    audio_seconds: float
    wall_seconds: float  # recognition only, not reading audio
    skipped: int

    @property
    def rtf(self) -> float:
        return self.wall_seconds / max(self.audio_seconds, 1e-9)


def read_once(utts: Sequence[Utterance]) -> List[Utterance]:
    """The utterances with loads that read each audio once, on first use, for decoding them again
    (audio that cannot be read is a counted, logged skip of :func:`decode` every time)."""
    return [dataclasses.replace(u, load=functools.lru_cache(maxsize=None)(u.load)) for u in utts]


def decode(rec, utts: Sequence[Utterance], piece_seconds: float = 0.1,
           on_decoded: Optional[Callable[[Decoded], None]] = None, progress_every: int = 50) -> DecodeRun:
    """Recognize every utterance with ``rec`` (a StreamingRecognizer) fed in pieces of ``piece_seconds``.

    Audio that cannot be read is a logged, counted skip.  ``on_decoded`` is
    called after each utterance (the command line prints there)."""
    decoded: List[Decoded] = []
    audio_seconds = wall = 0.0
    skipped = 0
    for n, u in enumerate(utts, 1):
        try:
            samples, rate = u.load()
        except (ValueError, OSError) as e:
            skipped += 1
            logging.warning("skipping %s: %s", u.uid, e)
            continue
        t0 = time.perf_counter()
        segments = rec.recognize_segments(samples, rate, piece_seconds)
        wall += time.perf_counter() - t0
        audio_seconds += len(samples) / rate
        d = Decoded(u, rec.transcript(segments), segments, len(samples) / rate)
        decoded.append(d)
        if on_decoded is not None:
            on_decoded(d)
        if progress_every and n % progress_every == 0:
            logging.info("%d/%d utterances, RTF so far %.3f", n, len(utts), wall / max(audio_seconds, 1e-9))
    return DecodeRun(decoded, audio_seconds, wall, skipped)


def score(decoded: Sequence[Decoded]) -> Dict[str, Dict[str, float]]:
    """The metrics summary per mode ("N" against the N references; "P" against the P references, over the
    utterances that have one); a mode is absent when no utterance has both its output and a reference."""
    return {mode: corpus.summary() for mode, corpus in score_corpora(decoded).items()}


def score_corpora(decoded: Sequence[Decoded]) -> Dict[str, "CorpusScore"]:
    """:func:`score`'s per-utterance counts (:class:`zipformer_pc.metrics.CorpusScore` per mode)."""
    from zipformer_pc.metrics import score_corpus

    out = {}
    for mode in ("N", "P"):
        pairs = []
        for d in decoded:
            ref = d.utt.ref_n if mode == "N" else d.utt.ref_p
            if ref is not None and mode in d.hyps:
                pairs.append((d.utt.uid, ref, d.hyps[mode]))
        if pairs:
            out[mode] = score_corpus(pairs)
    return out


def write_hyps(path: Path, decoded: Sequence[Decoded]) -> None:
    """The runtime's output file: an 'id<TAB>mode<TAB>text' line per utterance and mode."""
    with open(path, "w", encoding="utf-8") as f:
        for d in decoded:
            for m, text in d.hyps.items():
                f.write(f"{d.utt.uid}\t{m}\t{text}\n")


def score_by_speaker(decoded: Sequence[Decoded]) -> Dict[str, Dict[str, Dict[str, float]]]:
    """:func:`score` per speaker ("?" for utterances without one), speakers sorted."""
    groups: Dict[str, List[Decoded]] = defaultdict(list)
    for d in decoded:
        groups[d.utt.speaker or "?"].append(d)
    return {spk: score(ds) for spk, ds in sorted(groups.items())}
