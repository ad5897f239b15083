#!/usr/bin/env python3
"""Streaming recognition with onnxruntime: both transcripts from one encoder pass.

Needs only onnxruntime, numpy, kaldi-native-fbank and the exported files
(``export/export_onnx.py``): the feature options are read from the
encoder's metadata, the text from ``tokens.txt``.  (A ``punct``-only model's
N transcript is derived with the recipe's normalization,
``zipformer_pc.text.normalized``, which is pure Python.)

Usage:
  # wav files and/or folders of wavs; prints both transcripts and the RTF
  python export/onnx_streaming.py --model-dir egs/synth/exp/conditioned/onnx a.wav wavs/
  # a lhotse cut manifest, scored against its P and N references
  python export/onnx_streaming.py --model-dir DIR --cuts data/synth/fbank/synth_cuts_test.jsonl.gz --int8 true

In Python::

  rec = StreamingRecognizer.from_dir("exp/onnx")
  s = rec.create_stream()
  for piece in pieces:                 # any sizes, any sample rate
      s.accept_waveform(44100, piece)
      rec.decode_stream(s)             # runs every chunk that is ready
      print(rec.get_result(s))         # partial: {"P": "...", "N": "..."}
  s.input_finished()                   # pads the tail so no frame is lost
  rec.decode_stream(s)
  print(rec.get_result(s))             # final

Search is greedy with at most one token per encoder frame, per mode, exactly
as sherpa-onnx's ``greedy_search`` (which also treats ``<unk>`` as blank:
it is never emitted and does not enter the predictor's context), with one
joiner call per frame as sherpa-onnx makes for one stream (an int8 joiner
quantizes each call's input with its own scale, so batching frames would
change the result).
"""

import argparse
import logging
import math
import sys
import time
import wave
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import kaldi_native_fbank as knf
import numpy as np
import onnxruntime as ort

BLANK_ID = 0


# ---------------------------------------------------------------------------
# audio


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
        raise ValueError(f"{path}: not a PCM wav file ({e}); convert it, e.g. `sox in out.wav`") from e
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


# ---------------------------------------------------------------------------
# model


def _session(path: Path, threads: int) -> ort.InferenceSession:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(str(path), sess_options=opts, providers=["CPUExecutionProvider"])


def _ints(meta: Dict[str, str], key: str) -> List[int]:
    return [int(v) for v in meta[key].split(",")]


def fbank_options_from_metadata(meta: Dict[str, str]) -> "knf.FbankOptions":
    """kaldi-native-fbank options from the ``fbank_*`` metadata the export copied
    from ``zipformer_pc.features.FBANK_OPTIONS`` (the recipe's one feature config)."""
    def get(k: str) -> str:
        if f"fbank_{k}" not in meta:
            raise ValueError(f"encoder metadata lacks fbank_{k}: was it exported by export/export_onnx.py?")
        return meta[f"fbank_{k}"]

    opts = knf.FbankOptions()
    opts.frame_opts.samp_freq = float(get("sampling_rate"))
    opts.frame_opts.frame_shift_ms = float(get("frame_shift_ms"))
    opts.frame_opts.frame_length_ms = float(get("frame_length_ms"))
    opts.frame_opts.dither = float(get("dither"))
    opts.frame_opts.snip_edges = get("snip_edges") == "true"
    opts.frame_opts.preemph_coeff = float(get("preemph_coeff"))
    opts.frame_opts.remove_dc_offset = get("remove_dc_offset") == "true"
    opts.frame_opts.window_type = get("window_type")
    opts.frame_opts.round_to_power_of_two = get("round_to_power_of_two") == "true"
    opts.mel_opts.num_bins = int(get("num_mel_bins"))
    opts.mel_opts.low_freq = float(get("low_freq"))
    opts.mel_opts.high_freq = float(get("high_freq"))
    opts.energy_floor = float(get("energy_floor"))
    opts.use_energy = False
    opts.use_log_fbank = True
    opts.use_power = True
    return opts


def find_model_files(model_dir: Path, int8: bool = False) -> Dict[str, Path]:
    """The one exported set in ``model_dir``: ``{"encoder", "decoder-P", "joiner-P", ..., "tokens"}``."""
    model_dir = Path(model_dir)
    ext = ".int8.onnx" if int8 else ".onnx"
    encoders = [p for p in sorted(model_dir.glob("encoder*" + ext)) if int8 or not p.name.endswith(".int8.onnx")]
    if len(encoders) != 1:
        raise FileNotFoundError(
            f"{model_dir}: expected one encoder*{ext}, found {[p.name for p in encoders]}"
            " (pass --encoder etc. explicitly or use a directory per export)")
    suffix = encoders[0].name[len("encoder"):]
    files = {"encoder": encoders[0], "tokens": model_dir / "tokens.txt"}
    for mode in ("P", "N"):
        dec, joi = model_dir / f"decoder-{mode}{suffix}", model_dir / f"joiner-{mode}{suffix}"
        if dec.exists() and joi.exists():
            files[f"decoder-{mode}"], files[f"joiner-{mode}"] = dec, joi
    if not files["tokens"].exists():
        raise FileNotFoundError(f"{files['tokens']} is missing")
    return files


@dataclass
class _ModeState:
    tokens: List[int]
    decoder_out: np.ndarray
    frames: List[int] = field(default_factory=list)  # 25 Hz frame index of each token


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
        self.hyps: Dict[str, _ModeState] = {m: recognizer.initial_hyp(m) for m in recognizer.search_modes}

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


class StreamingRecognizer:
    """Streaming transducer on onnxruntime with one decoder/joiner pair per output mode.

    Args:
      files: from :func:`find_model_files` (``encoder``, ``tokens`` and
        ``decoder-MODE`` / ``joiner-MODE`` for each mode present).
      num_threads: intra-op threads of the encoder session (the decoder and
        joiner sessions use one: on a 2-core machine that split is fastest).
      modes: the modes to search (default: all the files provide).
    """

    def __init__(self, files: Dict[str, Path], num_threads: int = 1, modes: Optional[Sequence[str]] = None) -> None:
        self.encoder = _session(files["encoder"], num_threads)
        meta = self.encoder.get_modelmeta().custom_metadata_map
        if meta.get("model_type") != "zipformer2":
            raise ValueError(f"{files['encoder']}: not a streaming Zipformer2 encoder (model_type={meta.get('model_type')})")
        self.meta = meta
        self.T = int(meta["T"])
        self.decode_chunk_len = int(meta["decode_chunk_len"])
        self.transducer_type = meta.get("transducer_type", "")
        self.fbank_opts = fbank_options_from_metadata(meta)
        self.sample_rate = int(float(meta["fbank_sampling_rate"]))
        self.frame_shift = int(round(self.sample_rate * float(meta["fbank_frame_shift_ms"]) / 1000))
        available = [m for m in ("P", "N") if f"decoder-{m}" in files]
        if not available:
            raise FileNotFoundError("no decoder-P/decoder-N and joiner files given")
        self.search_modes = list(modes) if modes else available
        for m in self.search_modes:
            if m not in available:
                raise ValueError(f"mode {m} requested but no decoder-{m}/joiner-{m} files")
        self.decoders = {m: _session(files[f"decoder-{m}"], 1) for m in self.search_modes}
        self.joiners = {m: _session(files[f"joiner-{m}"], 1) for m in self.search_modes}
        dmeta = self.decoders[self.search_modes[0]].get_modelmeta().custom_metadata_map
        self.context_size = int(dmeta["context_size"])
        self.vocab_size = int(dmeta["vocab_size"])
        self.tokens = self._read_tokens(files["tokens"])
        self.unk_id = self.tokens.index("<unk>") if "<unk>" in self.tokens else -1
        if len(self.tokens) != self.vocab_size:
            raise ValueError(f"{files['tokens']}: {len(self.tokens)} tokens, model vocab_size {self.vocab_size}")
        self._state_inputs = self.encoder.get_inputs()[1:]
        self._state_shapes = self._init_state_shapes()

    @classmethod
    def from_dir(cls, model_dir, int8: bool = False, **kwargs) -> "StreamingRecognizer":
        return cls(find_model_files(Path(model_dir), int8), **kwargs)

    @staticmethod
    def _read_tokens(path: Path) -> List[str]:
        table: Dict[int, str] = {}
        for n, line in enumerate(open(path, encoding="utf-8"), 1):
            parts = line.rstrip("\n").split()
            if not parts:
                continue
            if len(parts) != 2 or not parts[1].isdigit():
                raise ValueError(f"{path}:{n}: expected 'token id', got {line.rstrip()!r}")
            table[int(parts[1])] = parts[0]
        if sorted(table) != list(range(len(table))):
            raise ValueError(f"{path}: token ids are not 0..{len(table) - 1}")
        return [table[i] for i in range(len(table))]

    def _init_state_shapes(self) -> List[Tuple[Tuple[int, ...], type]]:
        """State shapes for one stream from the metadata (the way sherpa-onnx builds them)."""
        m = self.meta
        layers, dims = _ints(m, "num_encoder_layers"), _ints(m, "encoder_dims")
        kernels, left = _ints(m, "cnn_module_kernels"), _ints(m, "left_context_len")
        qdims, vdims, heads = _ints(m, "query_head_dims"), _ints(m, "value_head_dims"), _ints(m, "num_heads")
        shapes: List[Tuple[Tuple[int, ...], type]] = []
        for i, n in enumerate(layers):
            for _ in range(n):
                shapes += [
                    ((left[i], 1, qdims[i] * heads[i]), np.float32),
                    ((1, 1, left[i], 3 * dims[i] // 4), np.float32),
                    ((left[i], 1, vdims[i] * heads[i]), np.float32),
                    ((left[i], 1, vdims[i] * heads[i]), np.float32),
                    ((1, dims[i], kernels[i] // 2), np.float32),
                    ((1, dims[i], kernels[i] // 2), np.float32),
                ]
        num_bins = int(m["fbank_num_mel_bins"])
        shapes.append(((1, 128, 3, ((num_bins - 1) // 2 - 1) // 2), np.float32))
        shapes.append(((1,), np.int64))
        if len(shapes) != len(self._state_inputs):
            raise ValueError(f"encoder has {len(self._state_inputs)} state inputs, metadata implies {len(shapes)}")
        return shapes

    def init_states(self) -> List[np.ndarray]:
        return [np.zeros(s, dtype=t) for s, t in self._state_shapes]

    def initial_hyp(self, mode: str) -> _ModeState:
        ctx = np.full((1, self.context_size), BLANK_ID, dtype=np.int64)
        return _ModeState(tokens=[], decoder_out=self.decoders[mode].run(None, {"y": ctx})[0])

    def create_stream(self) -> Stream:
        return Stream(self)

    def tail_padding_frames(self, num_samples: int, chunks_done: int) -> int:
        """Silence frames to append so every real encoder frame is in a complete chunk."""
        frames = (num_samples + self.frame_shift // 2) // self.frame_shift  # snip_edges=False
        out_frames = max(0, (frames - 7) // 2)  # 50 Hz frames of the real audio
        chunk = self.decode_chunk_len // 2
        chunks = max(chunks_done, -(-out_frames // chunk))
        if chunks == 0:
            return 0
        needed = self.decode_chunk_len * (chunks - 1) + self.T
        return max(0, needed - frames)

    # -- decoding --------------------------------------------------------

    def is_ready(self, s: Stream) -> bool:
        return s.fbank.num_frames_ready - s.frame_offset >= self.T

    def decode_stream(self, s: Stream) -> int:
        """Run every chunk that is ready; returns how many ran."""
        n = 0
        while self.is_ready(s):
            start = s.frame_offset
            x = np.stack([s.fbank.get_frame(start + i) for i in range(self.T)])[None].astype(np.float32)
            feeds = {"x": x}
            feeds.update({i.name: v for i, v in zip(self._state_inputs, s.states)})
            out = self.encoder.run(None, feeds)
            s.states = out[1:]
            enc = out[0][0]
            for m in self.search_modes:
                self._greedy(m, enc, s.hyps[m], s.num_chunks * enc.shape[0])
            s.fbank.pop(self.decode_chunk_len)
            s.frame_offset += self.decode_chunk_len
            s.num_chunks += 1
            n += 1
        return n

    def _greedy(self, mode: str, enc: np.ndarray, hyp: _ModeState, frame0: int) -> None:
        # One joiner call per frame, as sherpa-onnx does for one stream: an
        # int8 joiner quantizes its input dynamically with one scale per call,
        # so frames batched together would change each other's logits.
        joiner, decoder = self.joiners[mode], self.decoders[mode]
        for t in range(enc.shape[0]):
            logits = joiner.run(None, {"encoder_out": enc[t : t + 1], "decoder_out": hyp.decoder_out})[0]
            best = int(logits[0].argmax())
            if best == BLANK_ID or best == self.unk_id:
                continue
            hyp.tokens.append(best)
            hyp.frames.append(frame0 + t)
            ctx = ([BLANK_ID] * self.context_size + hyp.tokens)[-self.context_size:]
            hyp.decoder_out = decoder.run(None, {"y": np.array([ctx], dtype=np.int64)})[0]

    def text(self, token_ids: Sequence[int]) -> str:
        return " ".join("".join(self.tokens[i] for i in token_ids).replace("\u2581", " ").split())

    def get_result(self, s: Stream) -> Dict[str, str]:
        """Current (partial, or final after ``input_finished``) transcripts by mode.
        A ``punct``-only model also reports N, derived by the recipe's normalization."""
        res = {m: self.text(h.tokens) for m, h in s.hyps.items()}
        if "N" not in res and self.transducer_type == "punct":
            from zipformer_pc.text import normalized

            res["N"] = normalized(res["P"])
        return res

    def get_tokens(self, s: Stream) -> Dict[str, List[int]]:
        return {m: list(h.tokens) for m, h in s.hyps.items()}

    def recognize(self, samples: np.ndarray, sample_rate: int, piece_seconds: float = 0.0) -> Dict[str, str]:
        """Recognize one utterance, fed in pieces of ``piece_seconds`` (0: at once)."""
        s = self.create_stream()
        step = len(samples) if piece_seconds <= 0 else max(1, int(piece_seconds * sample_rate))
        for i in range(0, len(samples), max(step, 1)):
            s.accept_waveform(sample_rate, samples[i : i + step])
            self.decode_stream(s)
        s.input_finished()
        self.decode_stream(s)
        return self.get_result(s)


# ---------------------------------------------------------------------------
# CLI


def _wav_inputs(paths: Sequence[str]) -> List[Tuple[str, Path]]:
    items = []
    for p in map(Path, paths):
        if p.is_dir():
            items += [(w.stem, w) for w in sorted(p.rglob("*.wav"))]
        elif p.exists():
            items.append((p.stem, p))
        else:
            raise FileNotFoundError(f"{p} does not exist")
    return items


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("inputs", nargs="*", help="wav files or folders of wav files")
    p.add_argument("--model-dir", type=Path, required=True, help="output of export/export_onnx.py")
    p.add_argument("--int8", type=lambda s: s.lower() in ("1", "true", "yes"), default=False)
    p.add_argument("--cuts", default=None, help="a lhotse cut manifest to decode and score (needs lhotse)")
    p.add_argument("--num-threads", type=int, default=1, help="encoder intra-op threads")
    p.add_argument("--piece-seconds", type=float, default=0.1, help="audio fed per accept_waveform call")
    p.add_argument("--modes", default="", help="comma list of P,N (default: all exported)")
    p.add_argument("--max-utts", type=int, default=0, help="decode at most this many (0: all)")
    p.add_argument("--output", type=Path, default=None, help="write 'id<TAB>mode<TAB>text' lines here")
    return p


def main(argv=None) -> None:
    args = get_parser().parse_args(argv)
    logging.basicConfig(format="%(asctime)s %(levelname)s %(message)s", level=logging.INFO)
    if not args.inputs and not args.cuts:
        sys.exit("give wav files / folders or --cuts")
    modes = [m for m in args.modes.split(",") if m] or None
    rec = StreamingRecognizer.from_dir(args.model_dir, args.int8, num_threads=args.num_threads, modes=modes)
    items: List[Tuple[str, object]] = list(_wav_inputs(args.inputs))
    refs: Dict[str, Tuple[str, Optional[str]]] = {}
    if args.cuts:
        from lhotse import load_manifest_lazy

        for cut in load_manifest_lazy(args.cuts):
            items.append((cut.id, cut))
            sup = cut.supervisions[0] if cut.supervisions else None
            if sup is not None:
                refs[cut.id] = (sup.text or "", (sup.custom or {}).get("text_p"))
    if args.max_utts > 0:
        items = items[: args.max_utts]
    hyps: Dict[str, Dict[str, str]] = {}
    audio_seconds = wall = 0.0
    skipped = 0
    for n, (uid, src) in enumerate(items, 1):
        try:
            if isinstance(src, Path):
                samples, rate = read_wav(str(src))
            else:
                samples, rate = src.load_audio()[0].astype(np.float32), int(src.sampling_rate)
        except (ValueError, OSError) as e:
            skipped += 1
            logging.warning("skipping %s: %s", uid, e)
            continue
        t0 = time.perf_counter()
        res = rec.recognize(samples, rate, args.piece_seconds)
        wall += time.perf_counter() - t0
        audio_seconds += len(samples) / rate
        hyps[uid] = res
        print(f"{uid}\t" + "\t".join(f"{m}: {res[m]}" for m in sorted(res, reverse=True)), flush=True)
        if n % 50 == 0:
            logging.info("%d/%d utterances, RTF so far %.3f", n, len(items), wall / max(audio_seconds, 1e-9))
    rtf = wall / max(audio_seconds, 1e-9)
    logging.info("Decoded %d utterances (%.1f s of audio, %d skipped) in %.1f s: RTF %.3f with %d encoder thread(s)",
                 len(hyps), audio_seconds, skipped, wall, rtf, args.num_threads)
    print(f"RTF {rtf:.4f} ({len(hyps)} utterances, {audio_seconds:.1f} s audio, {args.num_threads} thread(s))")
    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            for uid, res in hyps.items():
                for m, text in res.items():
                    f.write(f"{uid}\t{m}\t{text}\n")
    if refs:
        from zipformer_pc.metrics import score_corpus

        for mode in ("N", "P"):
            pairs = [(uid, refs[uid][1] if mode == "P" else refs[uid][0], h[mode]) for uid, h in hyps.items()
                     if mode in h and uid in refs and (mode == "N" or refs[uid][1] is not None)]
            if pairs:
                summary = score_corpus(pairs).summary()
                keys = ["wer"] if mode == "N" else ["wer", "punc_er", "case_er", "pc_wer"]
                print(f"{mode}: " + ", ".join(f"{k} {summary.get(k)}" for k in keys))


if __name__ == "__main__":
    main()
