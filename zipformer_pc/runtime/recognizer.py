"""Streaming recognition with onnxruntime: both transcripts from one encoder pass.

Needs only onnxruntime, numpy, kaldi-native-fbank and the exported files
(``python -m zipformer_pc.export``): the feature options are read from the
encoder's metadata, the text from ``tokens.txt``.  (A ``punct``-only model's
N transcript is derived with the recipe's normalization,
``zipformer_pc.text.normalized``, which is pure Python.)

In Python::

  from zipformer_pc.runtime import StreamingRecognizer

  rec = StreamingRecognizer.from_dir("exp/onnx")
  s = rec.create_stream()
  for piece in pieces:                 # any sizes, any sample rate
      s.accept_waveform(44100, piece)
      rec.decode_stream(s)             # runs every chunk that is ready
      print(rec.get_result(s))         # partial: {"P": "...", "N": "..."}
  s.input_finished()                   # pads the tail so no frame is lost
  for seg in rec.finish(s):            # decodes the rest, closes the last segment
      print(seg.as_dict())             # {"segment", "start", "end", "text": {"P", "N"},
                                       #  "words": {mode: [{"word", "start", "end"}]}, "tokens": ...}

Many streams at once (a server): ``rec.decode_streams(streams)`` runs the
ready chunks of all of them, one chunk per stream stacked into one encoder
call (fp32 encoders; an int8 encoder runs them one by one, because its
activation quantization is per call), and gives each stream what
``decode_stream`` would.

With ``StreamingRecognizer(files, endpoint=EndpointConfig())`` the stream is
cut into segments by sherpa-onnx-style endpoint rules
(:mod:`zipformer_pc.runtime.endpoint`): ``s.segments`` grows while audio
arrives, and ``rec.current_segment(s)`` is the partial one.  Word and token
times (seconds from the stream's start) come from the frames that emitted
them (:mod:`zipformer_pc.runtime.timestamps`).

Search runs per mode with at most one token per encoder frame, as
sherpa-onnx's (which also treats ``<unk>`` as blank: it is never emitted and
does not enter the predictor's context), with one joiner call per frame as
sherpa-onnx makes for one stream (an int8 joiner quantizes each call's input
with its own scale, so batching frames would change the result):

* ``greedy_search`` (the default), as sherpa-onnx's ``greedy_search``;
* ``modified_beam_search`` with ``beam`` paths, as sherpa-onnx's
  (``max_active_paths``): the paths carry over from chunk to chunk, paths
  with the same tokens are merged (their probabilities added, the likelier
  one's times kept), and the partial result is the path with the best log
  probability per token (the context counted, as sherpa-onnx does).  Partial
  results may then change their last words as better paths win.  At an
  endpoint the next segment starts from one fresh path.  With
  ``lm_scale > 0`` each searched mode fuses its token n-gram LM
  (``lm-MODE.arpa.gz`` in the model dir, ``local/train_lm.py``,
  :mod:`zipformer_pc.lm`): every non-blank token's score gains
  ``lm_scale * log P_LM(token | the path's last tokens) + lm_token_bonus``
  before the paths are pruned (shallow fusion; a segment's LM context starts
  at ``<s>``); with ``lodr_scale > 0`` it loses ``lodr_scale * log
  P_bigram(token | the path's last token)`` as well (LODR: the
  ``lodr-MODE.arpa.gz`` bigram of the training text, :class:`zipformer_pc.lm.LodrLm`).
  With hotwords (``hotwords=[...]`` for every stream, or per stream
  ``create_stream(hotwords=[...])``; :mod:`zipformer_pc.runtime.hotwords`)
  each mode's paths also carry a state in that mode's context graph
  (:mod:`zipformer_pc.runtime.context_graph`): each token of a phrase
  gains its bonus (before the paths are pruned from the phrase's third token
  on, ``HOTWORD_PRUNE_DEPTH``; after, to the paths kept, for the first two),
  a failed match gives back what it gained, a phrase completed as whole
  words keeps it, and the best path is picked without the bonus of a phrase
  begun but not finished.

When the model dir has a question model (``questions.json.gz``,
``local/train_questions.py``, :mod:`zipformer_pc.questions`), P's text,
words and tokens show ``?`` where a sentence the search ended with ``.``
reads as a question (``questions=False``: as searched, as sherpa-onnx
shows it).  The search itself is not changed.

With ``itn=True`` P's text and words (partial and final) show numbers as
digits (:mod:`zipformer_pc.itn`: "twenty five dollars" -> "$25"; a
rewritten span's time runs from its first word's start to its last word's
end); N and the tokens stay as spoken.
"""

import logging
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple, Union

import kaldi_native_fbank as knf
import numpy as np
import onnxruntime as ort

from zipformer_pc import itn as itn_rules
from zipformer_pc.lm import BoundLm, LodrLm, find_lm, lm_files, load_fusion_lms
from zipformer_pc.features import knf_fbank_options, options_from_metadata, tail_padded_frames
from zipformer_pc.modes import RUNTIME_ORDER, add_derived
from zipformer_pc.options import DECODING_METHODS, DEFAULT_BLANK_PENALTY, check_blank_penalty, resolve_fusion
from zipformer_pc.options import add_search_options as add_shared_search_options
from zipformer_pc.questions import QuestionModel, find_questions
from zipformer_pc.text import WORD_START
from zipformer_pc.runtime.context_graph import ContextGraph
from zipformer_pc.runtime.endpoint import EndpointConfig
from zipformer_pc.runtime.hotwords import (DEFAULT_HOTWORDS_SCORE, HotwordLike, PieceEncoder, as_hotwords,
                                           build_graphs, read_hotwords)
from zipformer_pc.runtime.stream import BeamHyp, ModeState, Segment, Stream
from zipformer_pc.runtime.timestamps import TimedWord, is_mark, joined_text, token_times, word_times

_log = logging.getLogger(__name__)
BLANK_ID = 0
# a hotword token's bonus counts before the paths are pruned when it takes a path this many tokens into a
# phrase or more; the bonus of a phrase's first tokens (word starts that countless words share) and the
# take-back of a failed match are added after pruning, to the paths kept (docs/decoding-extras.md, Hotwords)
HOTWORD_PRUNE_DEPTH = 3


def add_search_options(p) -> None:
    """The search options of the runtime's command lines: the shared group
    (:func:`zipformer_pc.options.add_search_options`: ``--decoding-method``, ``--beam-size``, the LM
    fusion, ``--blank-penalty``, ``--questions`` of the model dir) and ``--hotwords``."""
    add_shared_search_options(p, "the model dir")
    p.add_argument("--hotwords", type=Path, default=None,
                   help="modified_beam_search favours these phrases: a file of one phrase a line, cased as P "
                        "should write it (N uses its normalized form), optionally with its own bonus per token "
                        "('Queequeg :2.5'); '#' lines are comments")
    p.add_argument("--hotwords-score", type=float, default=DEFAULT_HOTWORDS_SCORE,
                   help="the bonus per token of a hotword without its own")


def search_kwargs(args, model_dir) -> Dict[str, object]:
    """The :class:`StreamingRecognizer` search arguments of the options of :func:`add_search_options`."""
    has_lm = args.decoding_method == "modified_beam_search" and any(find_lm(model_dir, m) for m in RUNTIME_ORDER)
    scale, bonus, lodr = resolve_fusion(args, has_lm, any(find_lm(model_dir, m, "lodr") for m in RUNTIME_ORDER))
    kwargs = {"decoding_method": args.decoding_method, "beam": args.beam_size, "lm_scale": scale,
              "lm_token_bonus": bonus, "lodr_scale": lodr, "blank_penalty": args.blank_penalty,
              "questions": args.questions}
    hotwords = getattr(args, "hotwords", None)
    if hotwords is not None:  # ValueError (or OSError) for a list the command line should refuse
        if args.decoding_method != "modified_beam_search":
            raise ValueError("--hotwords needs --decoding-method modified_beam_search")
        kwargs.update(hotwords=read_hotwords(hotwords), hotwords_score=args.hotwords_score)
    return kwargs


def itn_words(words: Sequence[TimedWord]) -> List[TimedWord]:
    """P's timed words with numbers as digits (:func:`zipformer_pc.itn.rewrite_words`): a rewritten
    span starts where its first word starts and ends where its last word ends."""
    return [TimedWord(text, words[a].start, words[b].end)
            for text, a, b in itn_rules.rewrite_words([w.word for w in words])]


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
    return knf_fbank_options(options_from_metadata(meta))


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
    files = {"encoder": encoders[0], "tokens": model_dir / "tokens.txt", **lm_files(model_dir, RUNTIME_ORDER)}
    for mode in RUNTIME_ORDER:
        dec, joi = model_dir / f"decoder-{mode}{suffix}", model_dir / f"joiner-{mode}{suffix}"
        if dec.exists() and joi.exists():
            files[f"decoder-{mode}"], files[f"joiner-{mode}"] = dec, joi
    questions = find_questions(model_dir)
    if questions is not None:
        files["questions"] = questions
    if (model_dir / "bpe.model").exists():  # hotwords are spelt with it
        files["bpe"] = model_dir / "bpe.model"
    if not files["tokens"].exists():
        raise FileNotFoundError(f"{files['tokens']} is missing")
    return files


class StreamingRecognizer:
    """Streaming transducer on onnxruntime with one decoder/joiner pair per output mode.

    Args:
      files: from :func:`find_model_files` (``encoder``, ``tokens`` and
        ``decoder-MODE`` / ``joiner-MODE`` for each mode present).
      num_threads: intra-op threads of the encoder session (the decoder and
        joiner sessions use one: on a 2-core machine that split is fastest).
      modes: the modes to search (default: all the files provide).
      endpoint: endpoint rules that cut a stream into segments (default:
        none; one segment per stream, as for a file).
      decoding_method: ``greedy_search`` or ``modified_beam_search``.
      beam: paths kept by ``modified_beam_search``.
      lm_scale, lm_token_bonus: shallow fusion of the ``lm-MODE`` files
        (``modified_beam_search`` only; 0: none).
      lodr_scale: with the LMs, the weight of the ``lodr-MODE`` bigrams
        subtracted (LODR; 0: none).
      blank_penalty: subtracted from the blank logit of each joiner output
        (both searches, every mode; 0: none; the default is the command
        lines' ``--blank-penalty``, chosen on dev).
      questions: whether P shows ``?`` where the ``questions`` file's model
        reads a question (when ``files`` has one).
      itn: whether P shows numbers as digits (:mod:`zipformer_pc.itn`); N
        is left spoken.
      hotwords: phrases ``modified_beam_search`` favours in every stream
        that is not given its own (:meth:`create_stream`): strings as the
        lines of a hotword file (``"Queequeg"``, ``"Queequeg :2.5"``),
        ``(phrase, bonus)`` pairs, or :class:`~zipformer_pc.runtime.hotwords.Hotword`.
      hotwords_score: the bonus per token of a hotword without its own.
    """

    itn = False  # the default also of recognizers made without __init__ (tests)
    default_contexts: Dict[str, ContextGraph] = {}  # never changed in place: replaced

    def __init__(self, files: Dict[str, Path], num_threads: int = 1, modes: Optional[Sequence[str]] = None,
                 endpoint: Optional[EndpointConfig] = None, batch_encoder: Optional[bool] = None,
                 decoding_method: str = "greedy_search", beam: int = 4,
                 lm_scale: float = 0.0, lm_token_bonus: float = 0.0, lodr_scale: float = 0.0,
                 blank_penalty: float = DEFAULT_BLANK_PENALTY, questions: bool = True, itn: bool = False,
                 hotwords: Optional[Sequence[HotwordLike]] = None,
                 hotwords_score: float = DEFAULT_HOTWORDS_SCORE) -> None:
        if decoding_method not in DECODING_METHODS:
            raise ValueError(f"decoding_method must be one of {', '.join(DECODING_METHODS)}, not {decoding_method!r}")
        if beam < 1:
            raise ValueError(f"beam must be at least 1, got {beam}")
        self.decoding_method = decoding_method
        self.beam = beam
        self.itn = bool(itn)
        if lm_scale < 0:
            raise ValueError(f"lm_scale must not be negative, got {lm_scale}")
        if lm_scale > 0 and decoding_method != "modified_beam_search":
            raise ValueError("an LM is fused in modified_beam_search only (lm_scale > 0 with greedy_search)")
        if lodr_scale < 0:
            raise ValueError(f"lodr_scale must not be negative, got {lodr_scale}")
        if lodr_scale > 0 and lm_scale <= 0:
            raise ValueError("LODR corrects the LM's fusion: lodr_scale > 0 needs lm_scale > 0")
        self.lm_scale = lm_scale
        self.lm_token_bonus = lm_token_bonus
        self.lodr_scale = lodr_scale
        self.blank_penalty = check_blank_penalty(blank_penalty)
        self.endpoint = endpoint if endpoint is not None else EndpointConfig(enabled=False)
        self.encoder = _session(files["encoder"], num_threads)
        # decode_streams() stacks the chunks of several streams into one encoder
        # call; an int8 encoder quantizes its activations with one scale per
        # call, so there a stream's result would depend on its batch-mates
        int8 = Path(files["encoder"]).name.endswith(".int8.onnx")
        self.batch_encoder = (not int8) if batch_encoder is None else batch_encoder
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
        # seconds per encoder output frame: a chunk of decode_chunk_len feature
        # frames gives decode_chunk_len / 4 encoder frames (checked per chunk)
        self.frame_seconds = 4 * self.frame_shift / self.sample_rate
        available = [m for m in RUNTIME_ORDER if f"decoder-{m}" in files]
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
        self.lms: Dict[str, Union[BoundLm, LodrLm]] = {}
        if lm_scale > 0:
            self.lms = load_fusion_lms(files, self.search_modes, self.tokens, lodr_scale)
            if not self.lms:
                raise FileNotFoundError(f"lm_scale {lm_scale} but no lm-MODE.arpa[.gz] for the modes "
                                        f"{','.join(self.search_modes)} (local/train_lm.py writes them)")
            _log.info("modified_beam_search fuses the token LMs %s (--lm-scale %g, --lm-token-bonus %g)",
                      ", ".join(str(files[f"lm-{m}"]) for m in self.lms), lm_scale, lm_token_bonus)
            if lodr_scale > 0:
                _log.info("LODR: less %g x the log probability of %s", lodr_scale,
                          ", ".join(str(files[f"lodr-{m}"]) for m in self.lms))
        self.questions: Optional[QuestionModel] = None
        if questions and "questions" in files and "P" in self.search_modes:
            self.questions = QuestionModel.load(files["questions"])
            _log.info("P: sentences that %s reads as questions end with ? (threshold %.2f)", files["questions"],
                      self.questions.threshold)
        self.hotwords_score = hotwords_score
        self._bpe_model = files.get("bpe")
        self._piece_encoder: Optional[PieceEncoder] = None
        self.default_contexts = self.hotword_graphs(hotwords) if hotwords else {}
        if hotwords:
            _log.info("hotwords: %d phrase(s), bonus %g per token unless given, spelt with %s",
                      len(hotwords), hotwords_score, self._piece_encoder.method)
        self._state_inputs = self.encoder.get_inputs()[1:]
        self._state_shapes = self._init_state_shapes()
        # the batch axis of each state: the one the export named (sherpa-onnx's layout:
        # axis 1 for the attention caches, 0 for the others)
        self._state_batch_axes = [next((k for k, d in enumerate(i.shape) if isinstance(d, str)), 0)
                                  for i in self._state_inputs]

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
        # the front end's cache: 128 channels whatever the front end's width, the shape sherpa-onnx
        # allocates (the export keeps it: zipformer_pc.model.subsampling.Conv2dSubsampling.cache_channels)
        shapes.append(((1, 128, 3, ((num_bins - 1) // 2 - 1) // 2), np.float32))
        shapes.append(((1,), np.int64))
        if len(shapes) != len(self._state_inputs):
            raise ValueError(f"encoder has {len(self._state_inputs)} state inputs, metadata implies {len(shapes)}")
        return shapes

    def init_states(self) -> List[np.ndarray]:
        return [np.zeros(s, dtype=t) for s, t in self._state_shapes]

    def initial_hyp(self, mode: str) -> ModeState:
        ctx = np.full((1, self.context_size), BLANK_ID, dtype=np.int64)
        return ModeState(tokens=[], decoder_out=self.decoders[mode].run(None, {"y": ctx})[0])

    def create_stream(self, hotwords: Optional[Sequence[HotwordLike]] = None,
                      hotwords_score: Optional[float] = None) -> Stream:
        """A new stream; with ``hotwords`` (a list, ``[]`` for none) instead of the recognizer's
        (:meth:`set_hotwords`)."""
        s = Stream(self)
        if hotwords is not None:
            self.set_hotwords(s, hotwords, hotwords_score)
        return s

    def hotword_graphs(self, hotwords: Sequence[HotwordLike],
                       score: Optional[float] = None) -> Dict[str, ContextGraph]:
        """The context graph of ``hotwords`` per searched mode (each in that mode's form and pieces:
        :func:`zipformer_pc.runtime.hotwords.build_graphs`); ``ValueError`` for a bad list, and
        with greedy search, which cannot use them."""
        items = as_hotwords(hotwords)
        if not items:
            return {}
        if self.decoding_method != "modified_beam_search":
            raise ValueError(f"hotwords need modified_beam_search (this recognizer runs {self.decoding_method})")
        if self._piece_encoder is None:
            self._piece_encoder = PieceEncoder(self.tokens, self._bpe_model)
        return build_graphs(items, self.search_modes, self._piece_encoder,
                            self.hotwords_score if score is None else score, self.vocab_size)

    def set_hotwords(self, s: Stream, hotwords: Sequence[HotwordLike], score: Optional[float] = None) -> None:
        """Give the stream its own hotwords (``[]``: none), before any of its audio is decoded."""
        if s.num_chunks:
            raise RuntimeError("set_hotwords after the stream's audio began to be decoded")
        s.contexts = self.hotword_graphs(hotwords, score)

    def tail_padding_frames(self, num_samples: int, chunks_done: int = 0) -> int:
        """Silence frames to append at the end of a stream of ``num_samples``: the tail
        silence every utterance is encoded with in training and decoding
        (``features.tail_padded_frames``: at least ``TAIL_SILENCE_FRAMES``, then up
        to the end of the last chunk and its look-ahead).  None for an empty stream."""
        frames = (num_samples + self.frame_shift // 2) // self.frame_shift  # snip_edges=False
        if frames == 0 and chunks_done == 0:
            return 0
        needed = tail_padded_frames(frames, self.decode_chunk_len // 2)
        # the chunks already run never need more than this (a chunk runs once T frames are in)
        needed = max(needed, self.decode_chunk_len * max(chunks_done - 1, 0) + self.T)
        return max(0, needed - frames)

    # -- decoding --------------------------------------------------------

    def is_ready(self, s: Stream) -> bool:
        return s.fbank.num_frames_ready - s.frame_offset >= self.T

    def decode_stream(self, s: Stream) -> int:
        """Run every chunk that is ready; returns how many ran."""
        n = 0
        while self.is_ready(s):
            feeds = {"x": self._chunk_features(s)[None]}
            feeds.update({i.name: v for i, v in zip(self._state_inputs, s.states)})
            out = self.encoder.run(None, feeds)
            self._advance(s, out[0][0], out[1:])
            n += 1
        return n

    def decode_streams(self, streams: Sequence[Stream], max_batch: int = 32) -> int:
        """Run every chunk that is ready in any of ``streams``; returns how many ran.

        Each round takes one chunk of every ready stream and, with
        ``batch_encoder`` (the default for fp32 encoders), stacks them into one
        encoder call of at most ``max_batch`` streams (states stacked on their
        batch axes); the search then runs per stream as in :meth:`decode_stream`.
        The streams may be at different positions: each carries its own
        states, so the results are those of decoding each stream alone (to
        float rounding of the batched matrix products; tested).
        """
        if max_batch < 1:
            raise ValueError(f"max_batch must be at least 1, got {max_batch}")
        if len({id(s) for s in streams}) != len(streams):
            raise ValueError("a stream is listed twice")
        n = 0
        while True:
            ready = [s for s in streams if self.is_ready(s)]
            if not ready:
                return n
            if not self.batch_encoder:
                max_batch = 1
            for b in range(0, len(ready), max_batch):
                group = ready[b : b + max_batch]
                feeds = {"x": np.stack([self._chunk_features(s) for s in group])}
                for k, (inp, axis) in enumerate(zip(self._state_inputs, self._state_batch_axes)):
                    feeds[inp.name] = np.concatenate([s.states[k] for s in group], axis=axis)
                out = self.encoder.run(None, feeds)
                for j, s in enumerate(group):
                    states = [np.ascontiguousarray(np.take(v, [j], axis=axis))
                              for v, axis in zip(out[1:], self._state_batch_axes)]
                    self._advance(s, out[0][j], states)
                    n += 1

    def _chunk_features(self, s: Stream) -> np.ndarray:
        """The ``T`` feature frames of the stream's next chunk, (T, num_bins)."""
        start = s.frame_offset
        return np.stack([s.fbank.get_frame(start + i) for i in range(self.T)]).astype(np.float32)

    def _advance(self, s: Stream, enc: np.ndarray, states: List[np.ndarray]) -> None:
        """After the encoder ran the stream's next chunk (``enc``: its output
        frames, ``states``: the new states): search, move on, check the endpoint."""
        s.states = states
        if enc.shape[0] * 4 != self.decode_chunk_len:
            raise ValueError(f"a chunk of {self.decode_chunk_len} feature frames gave {enc.shape[0]} encoder "
                             "frames, not a quarter")
        for m in self.search_modes:
            if self.decoding_method == "greedy_search":
                last = self._greedy(m, enc, s.hyps[m], s.frames_done)
            else:
                last = self._beam_search(m, enc, s.hyps[m], s.frames_done, s.contexts.get(m))
            s.last_emit = max(s.last_emit, last)
        s.frames_done += enc.shape[0]
        s.fbank.pop(self.decode_chunk_len)
        s.frame_offset += self.decode_chunk_len
        s.num_chunks += 1
        self._reattach_leading_marks(s)
        if self.is_endpoint(s):
            self._end_segment(s)

    # -- segments (endpointing) and timestamps ------------------------------

    def is_endpoint(self, s: Stream) -> bool:
        """Whether the endpoint rules end the current segment now."""
        if not self.endpoint.enabled:
            return False
        quiet_since = max(s.segment_start, s.last_emit + 1)
        has_speech = any(h.tokens for h in s.hyps.values())
        return self.endpoint.detected(s.frames_done - s.segment_start, s.frames_done - quiet_since, has_speech,
                                      self.frame_seconds)

    def current_segment(self, s: Stream) -> Segment:
        """The segment being decoded (partial results), with timestamps."""
        texts, words, toks = {}, {}, {}
        for m, h in s.hyps.items():
            pieces = self.pieces(m, h.tokens)  # the text and the times from one rewrite
            texts[m] = joined_text(pieces)
            words[m] = word_times(pieces, h.frames, self.frame_seconds)
            toks[m] = token_times(pieces, h.frames, self.frame_seconds)
        texts = add_derived(self.transducer_type, texts)  # N of a punct model from P as spoken
        if self.itn and "P" in texts:
            texts["P"] = itn_rules.rewrite(texts["P"])
            if "P" in words:
                words["P"] = itn_words(words["P"])
        return Segment(len(s.segments), s.segment_start * self.frame_seconds, s.frames_done * self.frame_seconds,
                       texts, words, toks)

    def _end_segment(self, s: Stream) -> None:
        """Finish the current segment (kept when it has any token) and start the
        next with fresh hypotheses; the encoder states carry on."""
        if any(h.tokens for h in s.hyps.values()):
            s.segments.append(self.current_segment(s))
        s.hyps = {m: self.initial_hyp(m) for m in self.search_modes}
        s.segment_start = s.frames_done

    def _reattach_leading_marks(self, s: Stream) -> None:
        """A mark emitted after an endpoint, before the new segment's first word,
        ends the previous segment: move it there (a segment's final mark is
        never carried into the next one, nor lost).  The predictor's context
        then restarts after the mark, as it did at the endpoint."""
        if not s.segments:
            return
        prev = s.segments[-1]
        for m, h in s.hyps.items():
            n = 0
            while n < len(h.tokens) and is_mark(self.tokens[h.tokens[n]]):
                n += 1
            if n == 0 or m not in prev.text:
                continue
            marks = [self.tokens[i].lstrip(WORD_START) for i in h.tokens[:n]]
            if m == "P" and self.questions is not None:  # the marks end the previous segment's sentence
                marks = self.questions.rewrite_pieces(list(prev.text[m]) + marks)[-n:]
            times = token_times(marks, h.frames[:n], self.frame_seconds)
            prev.text[m] += "".join(marks)
            prev.tokens.setdefault(m, []).extend(times)
            end = (h.frames[n - 1] + 1) * self.frame_seconds
            if prev.words.get(m):
                w = prev.words[m][-1]
                prev.words[m][-1] = TimedWord(w.word + "".join(marks), w.start, end)
            prev.end = max(prev.end, end)
            del h.tokens[:n], h.frames[:n]
            h.beam = None  # beam search goes on from this one path

    def finish(self, s: Stream) -> List[Segment]:
        """After ``input_finished``: decode what is left and close the last
        segment; returns every segment of the stream (idempotent)."""
        if not s.finished:
            raise RuntimeError("finish() before input_finished()")
        self.decode_stream(s)
        self._end_segment(s)
        return s.segments

    def _greedy(self, mode: str, enc: np.ndarray, hyp: ModeState, frame0: int) -> int:
        """Greedy search over one chunk's frames; returns the last frame that
        emitted a token (-1 when none did)."""
        # One joiner call per frame, as sherpa-onnx does for one stream: an
        # int8 joiner quantizes its input dynamically with one scale per call,
        # so frames batched together would change each other's logits.
        joiner, decoder = self.joiners[mode], self.decoders[mode]
        last = -1
        for t in range(enc.shape[0]):
            logits = joiner.run(None, {"encoder_out": enc[t : t + 1], "decoder_out": hyp.decoder_out})[0]
            logits[:, BLANK_ID] -= self.blank_penalty
            best = int(logits[0].argmax())
            if best == BLANK_ID or best == self.unk_id:
                continue
            hyp.tokens.append(best)
            hyp.frames.append(frame0 + t)
            last = frame0 + t
            hyp.decoder_out = decoder.run(None, {"y": np.array([self._context(hyp.tokens)], dtype=np.int64)})[0]
        return last

    def _context(self, tokens: Sequence[int]) -> List[int]:
        """The predictor's input after ``tokens``: the last ``context_size`` of them, blank-padded."""
        return ([BLANK_ID] * self.context_size + list(tokens[-self.context_size:]))[-self.context_size:]

    def _beam_search(self, mode: str, enc: np.ndarray, hyp: ModeState, frame0: int,
                     context: Optional[ContextGraph] = None) -> int:
        """Modified beam search over one chunk's frames (``self.beam`` paths,
        one token per frame at most), favouring the phrases of ``context``;
        ``hyp`` then holds the best path.  Returns the last frame of this
        chunk on which the best path emitted a token (-1 when none did)."""
        joiner, decoder = self.joiners[mode], self.decoders[mode]
        lm = self.lms.get(mode)
        graph = context if context is not None and context.num_phrases else None
        beam = hyp.beam or [BeamHyp(list(hyp.tokens), list(hyp.frames), 0.0, hyp.decoder_out,
                                    lm.state_after(hyp.tokens) if lm else (),
                                    graph.state_after(hyp.tokens) if graph is not None else 0)]
        for t in range(enc.shape[0]):
            dec = np.concatenate([h.decoder_out for h in beam])
            logits = joiner.run(None, {"encoder_out": np.repeat(enc[t : t + 1], len(beam), axis=0),
                                       "decoder_out": dec})[0].astype(np.float64)
            logits[:, BLANK_ID] -= self.blank_penalty
            peak = logits.max(axis=1, keepdims=True)
            logp = logits - peak - np.log(np.exp(logits - peak).sum(axis=1, keepdims=True))
            if lm:
                logp = logp + lm.fusion([h.lm_state for h in beam], self.lm_scale, self.lm_token_bonus,
                                        (BLANK_ID, self.unk_id))
            if graph is not None:
                bonus, next_states = graph.fusion([h.context_state for h in beam], (BLANK_ID, self.unk_id))
                deep = graph.depths[next_states] >= HOTWORD_PRUNE_DEPTH
                logp = logp + np.where(deep, bonus, 0.0)  # pruned with these
                late = np.where(deep, 0.0, bonus).ravel()  # added to the paths kept
            scores = (logp + np.array([h.log_prob for h in beam])[:, None]).ravel()
            k = min(self.beam, scores.size)
            top = np.argpartition(-scores, k - 1)[:k]
            top = top[np.argsort(-scores[top], kind="stable")]
            if graph is not None:
                scores = scores + late
            vocab = logits.shape[1]
            paths: Dict[Tuple[int, ...], BeamHyp] = {}
            for i in top.tolist():
                parent, tok = beam[i // vocab], i % vocab
                score = float(scores[i])
                if tok == BLANK_ID or tok == self.unk_id:
                    new = BeamHyp(parent.tokens, parent.frames, score, parent.decoder_out, parent.lm_state,
                                  parent.context_state)
                else:
                    new = BeamHyp(parent.tokens + [tok], parent.frames + [frame0 + t], score, None,
                                  lm.next_state(parent.lm_state, tok) if lm else (),
                                  int(next_states[i // vocab, tok]) if graph is not None else 0)
                key = tuple(new.tokens)
                if key in paths:  # the same tokens by another path: add the probabilities
                    paths[key].log_prob = float(np.logaddexp(paths[key].log_prob, score))
                else:
                    paths[key] = new
            beam = list(paths.values())
            pending = [h for h in beam if h.decoder_out is None]
            if pending:
                ctx = np.array([self._context(h.tokens) for h in pending], dtype=np.int64)
                out = decoder.run(None, {"y": ctx})[0]
                for h, row in zip(pending, out):
                    h.decoder_out = row[None]
        # per token, as sherpa-onnx; without the bonus of a phrase begun but not finished
        def per_token(h: BeamHyp) -> float:
            held = graph.pending(h.context_state) if graph is not None else 0.0
            return (h.log_prob - held) / (self.context_size + len(h.tokens))

        best = max(beam, key=per_token)
        hyp.beam = beam
        hyp.tokens, hyp.frames, hyp.decoder_out = list(best.tokens), list(best.frames), best.decoder_out
        return best.frames[-1] if best.frames and best.frames[-1] >= frame0 else -1

    def pieces(self, mode: str, token_ids: Sequence[int]) -> List[str]:
        """The pieces ``mode`` shows for ``token_ids``: in P, the ``.`` that ends a
        sentence the question model reads as a question is ``?``."""
        pieces = [self.tokens[i] for i in token_ids]
        return self.questions.rewrite_pieces(pieces) if mode == "P" and self.questions is not None else pieces

    def text(self, mode: str, token_ids: Sequence[int]) -> str:
        return joined_text(self.pieces(mode, token_ids))

    def get_result(self, s: Stream) -> Dict[str, str]:
        """Current (partial, or final after ``input_finished``) transcripts by mode.
        A ``punct``-only model also reports N, derived by the recipe's normalization
        (the derived modes of ``zipformer_pc.modes``)."""
        out = add_derived(self.transducer_type, {m: self.text(m, h.tokens) for m, h in s.hyps.items()})
        if self.itn and "P" in out:
            out["P"] = itn_rules.rewrite(out["P"])
        return out

    def get_tokens(self, s: Stream) -> Dict[str, List[int]]:
        return {m: list(h.tokens) for m, h in s.hyps.items()}

    def recognize_segments(self, samples: np.ndarray, sample_rate: int, piece_seconds: float = 0.0) -> List[Segment]:
        """Recognize one stream, fed in pieces of ``piece_seconds`` (0: at once); its segments
        (one, or none for silence, unless endpointing is on)."""
        s = self.create_stream()
        step = len(samples) if piece_seconds <= 0 else max(1, int(piece_seconds * sample_rate))
        for i in range(0, len(samples), max(step, 1)):
            s.accept_waveform(sample_rate, samples[i : i + step])
            self.decode_stream(s)
        s.input_finished()
        return self.finish(s)

    def recognize(self, samples: np.ndarray, sample_rate: int, piece_seconds: float = 0.0) -> Dict[str, str]:
        """Recognize one utterance, fed in pieces of ``piece_seconds`` (0: at once): the
        transcript per mode (segments joined by spaces when endpointing is on)."""
        return self.transcript(self.recognize_segments(samples, sample_rate, piece_seconds))

    def transcript(self, segments: Sequence[Segment]) -> Dict[str, str]:
        """The text of every output mode over ``segments``, joined by spaces ("" for none)."""
        modes = add_derived(self.transducer_type, {m: "" for m in self.search_modes})
        return {m: " ".join(seg.text[m] for seg in segments if seg.text.get(m)) for m in modes}
