"""One stream being recognized by :class:`~zipformer_pc.runtime.recognizer.StreamingRecognizer`:
audio in, online features (kaldi-native-fbank), encoder states, one
hypothesis (or beam) per searched mode for the current segment, the segments
already finished (endpointing, :mod:`zipformer_pc.runtime.endpoint`), and its
hotword graphs (:mod:`zipformer_pc.runtime.hotwords`)."""

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Dict, List, Optional, Sequence

import kaldi_native_fbank as knf
import numpy as np

from zipformer_pc.runtime.audio import Resampler

if TYPE_CHECKING:
    from zipformer_pc.runtime.context_graph import ContextGraph
    from zipformer_pc.runtime.recognizer import StreamingRecognizer


@dataclass
class BeamHyp:
    """One path of modified beam search: tokens, their frames, its log probability
    and the predictor output for its context (None until computed)."""

    tokens: List[int]
    frames: List[int]
    log_prob: float
    decoder_out: Optional[np.ndarray]
    lm_state: tuple = ()
    context_state: int = 0  # its state in the stream's hotword graph of the mode (0: the root)


@dataclass
class ModeState:
    """The hypothesis of one mode: tokens so far (with greedy search the only
    path, with beam search the best one) and the predictor output for their
    context; ``beam`` holds the paths beam search carries from chunk to chunk."""

    tokens: List[int]
    decoder_out: np.ndarray
    frames: List[int] = field(default_factory=list)  # 25 Hz frame index of each token
    beam: Optional[List[BeamHyp]] = None


@dataclass
class Segment:
    """A finished segment of a stream: its text per mode, times in seconds from
    the stream's start, and per mode its words (marks attached) and tokens."""

    id: int
    start: float
    end: float
    text: Dict[str, str]
    words: Dict[str, list] = field(default_factory=dict)  # mode -> [TimedWord]
    tokens: Dict[str, list] = field(default_factory=dict)  # mode -> [TimedToken]

    def as_dict(self, timestamps: bool = True) -> dict:
        d = {"segment": self.id, "start": round(self.start, 3), "end": round(self.end, 3), "text": dict(self.text)}
        if timestamps:
            d["words"] = {m: [w.as_dict() for w in ws] for m, ws in self.words.items()}
            d["tokens"] = {m: [{"token": t.token, "start": round(t.start, 3)} for t in ts]
                           for m, ts in self.tokens.items()}
        return d


class Stream:
    """One utterance being recognized: audio in, features, states, hypotheses."""

    def __init__(self, recognizer: "StreamingRecognizer") -> None:
        self.rec = recognizer
        self.fbank = knf.OnlineFbank(recognizer.fbank_opts)
        self.resampler: Optional[Resampler] = None
        self.states = recognizer.init_states()
        self.frame_offset = 0  # feature frames popped from the fbank
        self.num_chunks = 0
        self.num_samples = 0  # at the model's rate, padding excluded
        self.finished = False
        self.hyps: Dict[str, ModeState] = {m: recognizer.initial_hyp(m) for m in recognizer.search_modes}
        self.frames_done = 0  # encoder frames decoded (25 Hz)
        self.segment_start = 0  # encoder frame where the current segment began
        self.last_emit = -1  # last encoder frame on which any searched mode emitted a token
        self.segments: List[Segment] = []  # finished segments, in order
        # mode -> the hotword graph beam search favours (StreamingRecognizer.set_hotwords)
        self.contexts: Dict[str, "ContextGraph"] = dict(getattr(recognizer, "default_contexts", None) or {})

    def accept_waveform(self, sample_rate: int, samples: Sequence[float]) -> None:
        """Add audio (float samples in [-1, 1], mono) at any sample rate."""
        if self.finished:
            raise RuntimeError("accept_waveform after input_finished")
        x = np.asarray(samples, dtype=np.float32).reshape(-1)
        if x.size == 0:
            return
        rate = self.rec.sample_rate
        if sample_rate != rate:
            if self.resampler is None:
                self.resampler = Resampler(sample_rate, rate)
            elif self.resampler.in_rate != sample_rate:
                raise ValueError(f"sample rate changed within a stream: {self.resampler.in_rate} -> {sample_rate}")
            x = self.resampler.process(x)
        self.num_samples += x.size
        self.fbank.accept_waveform(rate, x)

    def input_finished(self) -> None:
        """No more audio: flush the resampler, pad the tail with silence so the
        last chunk is complete, and finish the features."""
        if self.finished:
            return
        if self.resampler is not None:
            rest = self.resampler.flush()
            self.num_samples += rest.size
            if rest.size:
                self.fbank.accept_waveform(self.rec.sample_rate, rest)
        pad_frames = self.rec.tail_padding_frames(self.num_samples, self.num_chunks)
        if pad_frames > 0:
            self.fbank.accept_waveform(self.rec.sample_rate, np.zeros(pad_frames * self.rec.frame_shift, np.float32))
        self.fbank.input_finished()
        self.finished = True

    @property
    def duration(self) -> float:
        return self.num_samples / self.rec.sample_rate
