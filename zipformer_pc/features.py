"""The one feature configuration of the recipe.

Training features are computed with lhotse's ``Fbank`` (Kaldi-compatible,
written to lilcom chunky storage); the streaming runtime computes them online
with kaldi-native-fbank, and sherpa-onnx does the same internally.  The options
below are the single source for all three, chosen to match what sherpa-onnx's
``OnlineRecognizer.from_transducer`` uses so its results equal ours:

* 16 kHz mono input as float samples in [-1, 1],
* 25 ms Povey windows every 10 ms, pre-emphasis 0.97, DC offset removed,
* 80 mel bins from 20 Hz to Nyquist - 400 Hz, log power, no energy,
* no dither, ``snip_edges=False`` (frame count = round(num_samples / 160)).

``tests/data/test_features.py`` checks that lhotse and kaldi-native-fbank agree.

This module imports only numpy at load time (lhotse and kaldi-native-fbank
inside the functions that need them): the streaming runtime
(:mod:`zipformer_pc.runtime`) reads these options without torch or lhotse.
"""

from typing import Any, Dict, Mapping, Optional, Tuple

import numpy as np

SAMPLING_RATE = 16000
NUM_MEL_BINS = 80
FRAME_SHIFT_MS = 10.0
FRAME_LENGTH_MS = 25.0

FBANK_OPTIONS: Dict[str, Any] = {
    "sampling_rate": SAMPLING_RATE,
    "num_mel_bins": NUM_MEL_BINS,
    "frame_shift_ms": FRAME_SHIFT_MS,
    "frame_length_ms": FRAME_LENGTH_MS,
    "low_freq": 20.0,
    "high_freq": -400.0,
    "dither": 0.0,
    "snip_edges": False,
    "preemph_coeff": 0.97,
    "remove_dc_offset": True,
    "window_type": "povey",
    "round_to_power_of_two": True,
    "energy_floor": 1e-10,
}


# Where each option goes: its lhotse ``FbankConfig`` field (with a unit
# conversion) and its kaldi-native-fbank ``FbankOptions`` attribute path.
_MS = 1e-3
OPTION_NAMES: Dict[str, Tuple[str, float, str]] = {
    "sampling_rate": ("sampling_rate", 1.0, "frame_opts.samp_freq"),
    "num_mel_bins": ("num_mel_bins", 1.0, "mel_opts.num_bins"),
    "frame_shift_ms": ("frame_shift", _MS, "frame_opts.frame_shift_ms"),
    "frame_length_ms": ("frame_length", _MS, "frame_opts.frame_length_ms"),
    "low_freq": ("low_freq", 1.0, "mel_opts.low_freq"),
    "high_freq": ("high_freq", 1.0, "mel_opts.high_freq"),
    "dither": ("dither", 1.0, "frame_opts.dither"),
    "snip_edges": ("snip_edges", 1.0, "frame_opts.snip_edges"),
    "preemph_coeff": ("preemph_coeff", 1.0, "frame_opts.preemph_coeff"),
    "remove_dc_offset": ("remove_dc_offset", 1.0, "frame_opts.remove_dc_offset"),
    "window_type": ("window_type", 1.0, "frame_opts.window_type"),
    "round_to_power_of_two": ("round_to_power_of_two", 1.0, "frame_opts.round_to_power_of_two"),
    "energy_floor": ("energy_floor", 1.0, "energy_floor"),
}


def _scaled(value: Any, scale: float) -> Any:
    return value * scale if scale != 1.0 else value


def lhotse_fbank():
    """lhotse ``Fbank`` extractor with the recipe's options (training features)."""
    from lhotse.features.kaldi.extractors import Fbank, FbankConfig

    return Fbank(FbankConfig(**{field: _scaled(FBANK_OPTIONS[k], scale)
                                for k, (field, scale, _) in OPTION_NAMES.items()}))


def knf_fbank_options(options: Optional[Mapping[str, Any]] = None):
    """kaldi-native-fbank ``FbankOptions`` with the recipe's options (streaming runtime).

    ``options`` has the keys of :data:`FBANK_OPTIONS` (default: those); the
    runtime passes the values an exported encoder carries in its metadata
    (:func:`options_from_metadata`).
    """
    import kaldi_native_fbank as knf

    o = FBANK_OPTIONS if options is None else options
    opts = knf.FbankOptions()
    for k, (_, _, path) in OPTION_NAMES.items():
        owner, _, attr = path.rpartition(".")
        value = float(o[k]) if k == "sampling_rate" else o[k]
        setattr(getattr(opts, owner) if owner else opts, attr, value)
    opts.use_energy = False
    opts.use_log_fbank = True
    opts.use_power = True
    return opts


def options_to_metadata(options: Mapping[str, Any] = FBANK_OPTIONS) -> Dict[str, str]:
    """The options as ONNX metadata strings: ``fbank_KEY``, booleans as ``true``/``false``."""
    return {f"fbank_{k}": str(v).lower() if isinstance(v, bool) else str(v) for k, v in options.items()}


def options_from_metadata(meta: Mapping[str, str]) -> Dict[str, Any]:
    """The options an exported encoder carries (:func:`options_to_metadata`), typed as in
    :data:`FBANK_OPTIONS`; a missing key is an error."""
    out: Dict[str, Any] = {}
    for k, default in FBANK_OPTIONS.items():
        v = meta.get(f"fbank_{k}")
        if v is None:
            raise ValueError(f"encoder metadata lacks fbank_{k}: was it exported by python -m zipformer_pc.export?")
        if isinstance(default, bool):
            out[k] = v == "true"
        elif isinstance(default, int):
            out[k] = int(float(v))
        elif isinstance(default, float):
            out[k] = float(v)
        else:
            out[k] = v
    return out


def knf_fbank(samples: np.ndarray) -> np.ndarray:
    """Whole-utterance fbank with kaldi-native-fbank: ``(num_frames, 80)`` float32."""
    import kaldi_native_fbank as knf

    f = knf.OnlineFbank(knf_fbank_options())
    f.accept_waveform(SAMPLING_RATE, np.asarray(samples, dtype=np.float32).tolist())
    f.input_finished()
    if f.num_frames_ready == 0:
        return np.zeros((0, NUM_MEL_BINS), dtype=np.float32)
    return np.stack([f.get_frame(i) for i in range(f.num_frames_ready)]).astype(np.float32)


def num_frames(num_samples: int) -> int:
    """Frames produced for ``num_samples`` samples with ``snip_edges=False``."""
    shift = int(SAMPLING_RATE * FRAME_SHIFT_MS / 1000)
    return (num_samples + shift // 2) // shift


def encoder_frames(num_frames: int) -> int:
    """Encoder output frames (25 Hz) for ``num_frames`` feature frames (100 Hz):
    ``((T - 7) // 2 + 1) // 2``, the count of
    :meth:`zipformer_pc.model.zipformer.ZipformerEncoder.output_lengths`,
    without torch (data preparation drops cuts with more tokens than this)."""
    return (max((num_frames - 7) // 2, 0) + 1) // 2


# -- the silence after the end of an utterance -------------------------------
#
# A streaming encoder cannot be told where a stream ends: every chunk it runs is
# full, so at the end of a stream the runtime (and sherpa-onnx) appends silence
# and runs whole chunks over it.  A model trained and decoded with the end
# masked instead learns to emit the final punctuation mark *at* the masked end,
# a cue the runtime never gives: it then loses the mark (measured: a
# conditioned model fine-tuned with masked ends emitted a final "." on 13 of 30
# test utterances when decoded with masks, on 0 when decoded as the runtime
# does).  So training, decoding and the runtime all encode an utterance the
# same way: its frames, then at least TAIL_SILENCE_FRAMES frames of silence,
# up to the end of the chunk (the last chunk full).

# log-mel value of digital silence: both lhotse's Fbank and kaldi-native-fbank
# floor the mel energies at float32 epsilon, log(2**-23)
SILENCE_LOG_MEL = float(np.log(np.finfo(np.float32).eps))
# silence after the last frame of speech: 0.3 s at least
TAIL_SILENCE_FRAMES = 30
# feature frames the encoder's front end (Conv2dSubsampling) reads beyond
# twice its 50 Hz output frames: T frames give (T - 7) // 2
_EMBED_CONTEXT = 7


def subsampled_frames(num_frames: int) -> int:
    """50 Hz frames of the encoder's front end for ``num_frames`` feature frames."""
    return max((num_frames - _EMBED_CONTEXT) // 2, 0)


def tail_padded_frames(num_frames: int, chunk_size: int) -> int:
    """Feature frames an utterance of ``num_frames`` is encoded with: the real
    ones, then at least :data:`TAIL_SILENCE_FRAMES` of silence, and for a
    streaming chunk size (50 Hz frames, > 0) as many more as fill its last
    chunk: ``2 k chunk + 7`` frames (``k`` whole chunks at 50 Hz, the front
    end's look-ahead included), the smallest such that holds them.
    ``chunk_size <= 0`` (full context): the minimum tail."""
    want = num_frames + TAIL_SILENCE_FRAMES
    if chunk_size <= 0:
        return want
    chunks = max(1, -(-(want - _EMBED_CONTEXT) // (2 * chunk_size)))
    return 2 * chunks * chunk_size + _EMBED_CONTEXT

