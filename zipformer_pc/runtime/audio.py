"""Audio input of the streaming runtime: PCM wav reading, listing wav inputs and streaming
resampling (numpy only)."""

import math
import wave
from collections import Counter
from pathlib import Path
from typing import List, Sequence, Tuple

import numpy as np


class Resampler:
    """Streaming band-limited resampler (windowed sinc, Hann window).

    Output sample ``n`` is at time ``n / out_rate``; it is computed once the
    input reaches ``n / out_rate + width``, so feeding a signal in pieces
    gives the same samples as feeding it at once.  ``flush`` treats the
    future as silence and emits the rest (``ceil(len * out / in)`` samples
    in total).
    """

    def __init__(self, in_rate: int, out_rate: int, num_zeros: int = 16) -> None:
        if in_rate <= 0 or out_rate <= 0:
            raise ValueError(f"sample rates must be positive, got {in_rate} -> {out_rate}")
        self.in_rate, self.out_rate = in_rate, out_rate
        self.cutoff = 0.99 * 0.5 * min(in_rate, out_rate)  # Hz
        self.width = num_zeros / (2.0 * self.cutoff)  # seconds either side
        self.buf = np.zeros(0, dtype=np.float64)
        self.buf_start = 0  # absolute index of buf[0]
        self.num_in = 0
        self.num_out = 0

    def _compute(self, stop: int) -> np.ndarray:
        if stop <= self.num_out:
            return np.zeros(0, dtype=np.float32)
        n = np.arange(self.num_out, stop)
        t = n / self.out_rate
        first = np.ceil((t - self.width) * self.in_rate).astype(np.int64)
        taps = int(math.ceil(2 * self.width * self.in_rate)) + 1
        idx = first[:, None] + np.arange(taps)[None, :]
        delta = idx / self.in_rate - t[:, None]
        inside = np.abs(delta) < self.width
        weights = (2 * self.cutoff / self.in_rate) * np.sinc(2 * self.cutoff * delta)
        weights *= 0.5 + 0.5 * np.cos(np.pi * delta / self.width)
        weights[~inside] = 0.0
        local = idx - self.buf_start
        valid = (idx >= 0) & (idx < self.num_in) & (local >= 0) & (local < self.buf.size)
        samples = np.where(valid, self.buf[np.clip(local, 0, max(self.buf.size - 1, 0))] if self.buf.size else 0.0, 0.0)
        out = (weights * samples).sum(axis=1).astype(np.float32)
        self.num_out = stop
        # keep what the next output still needs
        keep_from = int(math.ceil((self.num_out / self.out_rate - self.width) * self.in_rate)) - 1
        drop = min(max(0, keep_from - self.buf_start), self.buf.size)
        self.buf = self.buf[drop:]
        self.buf_start += drop
        return out

    def process(self, samples: np.ndarray) -> np.ndarray:
        self.buf = np.concatenate([self.buf, np.asarray(samples, dtype=np.float64)])
        self.num_in += len(samples)
        # output n is ready when n / out + width < num_in / in
        ready = int(math.floor((self.num_in / self.in_rate - self.width) * self.out_rate))
        return self._compute(max(self.num_out, ready))

    def flush(self) -> np.ndarray:
        total = int(math.ceil(self.num_in * self.out_rate / self.in_rate))
        return self._compute(total)


def read_wav(path: str) -> Tuple[np.ndarray, int]:
    """PCM wav (8/16/24/32-bit integer, any channels, mixed to mono) as float32 in [-1, 1]."""
    try:
        with wave.open(str(path), "rb") as w:
            rate, width, channels, n = w.getframerate(), w.getsampwidth(), w.getnchannels(), w.getnframes()
            raw = w.readframes(n)
    except (wave.Error, EOFError) as e:
        why = str(e) or "the file ends before its header does"
        if Path(path).is_file() and Path(path).stat().st_size == 0:
            why = "an empty file"
        raise ValueError(f"{path}: not a PCM wav file ({why}); convert it, e.g. `sox in out.wav`") from e
    if width == 1:
        x = (np.frombuffer(raw, dtype=np.uint8).astype(np.float32) - 128.0) / 128.0
    elif width == 2:
        x = np.frombuffer(raw, dtype="<i2").astype(np.float32) / 32768.0
    elif width == 3:
        b = np.frombuffer(raw, dtype=np.uint8).reshape(-1, 3).astype(np.int32)
        v = b[:, 0] | (b[:, 1] << 8) | (b[:, 2] << 16)
        x = (np.where(v >= 1 << 23, v - (1 << 24), v)).astype(np.float32) / float(1 << 23)
    elif width == 4:
        x = np.frombuffer(raw, dtype="<i4").astype(np.float32) / float(1 << 31)
    else:
        raise ValueError(f"{path}: unsupported sample width {width}")
    if channels > 1:
        x = x.reshape(-1, channels).mean(axis=1)
    return x, rate


def wav_files(paths: Sequence[str]) -> List[Path]:
    """The given wav files and the ``.wav`` files (any case of the suffix) under the given
    folders (sorted), in order; ``FileNotFoundError`` for a path that does not exist and
    for a folder that holds no wav file."""
    out: List[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            found = sorted(q for q in p.rglob("*") if q.suffix.lower() == ".wav" and q.is_file())
            if not found:
                raise FileNotFoundError(f"{p}: a folder without .wav files (its subfolders included)")
            out += found
        elif p.exists():
            out.append(p)
        else:
            raise FileNotFoundError(f"{p} does not exist")
    return out


def utterance_ids(paths: Sequence[Path]) -> List[str]:
    """An id for each wav: its name without the suffix, or, for names that two inputs
    share (``a/x.wav``, ``b/x.wav``), its path without the suffix, so that no two
    inputs' lines of output share an id."""
    stems = Counter(p.stem for p in paths)
    ids = [str(p.with_suffix("")) if stems[p.stem] > 1 else p.stem for p in paths]
    dup = sorted(i for i, n in Counter(ids).items() if n > 1)
    if dup:
        raise ValueError(f"the same wav is given more than once: {', '.join(dup[:3])}")
    return ids
