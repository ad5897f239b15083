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

``tests/test_features.py`` checks that lhotse and kaldi-native-fbank agree.

This module imports only numpy at load time (lhotse and kaldi-native-fbank
inside the functions that need them): the streaming runtime
(:mod:`zipformer_pc.runtime`) reads these options without torch or lhotse.
"""

from typing import Any, Dict, Mapping, Optional

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


def lhotse_fbank():
    """lhotse ``Fbank`` extractor with the recipe's options (training features)."""
    from lhotse.features.kaldi.extractors import Fbank, FbankConfig

    o = FBANK_OPTIONS
    return Fbank(
        FbankConfig(
            sampling_rate=o["sampling_rate"],
            frame_length=o["frame_length_ms"] / 1000,
            frame_shift=o["frame_shift_ms"] / 1000,
            num_mel_bins=o["num_mel_bins"],
            low_freq=o["low_freq"],
            high_freq=o["high_freq"],
            dither=o["dither"],
            snip_edges=o["snip_edges"],
            preemph_coeff=o["preemph_coeff"],
            remove_dc_offset=o["remove_dc_offset"],
            window_type=o["window_type"],
            round_to_power_of_two=o["round_to_power_of_two"],
            energy_floor=o["energy_floor"],
        )
    )


def knf_fbank_options(options: Optional[Mapping[str, Any]] = None):
    """kaldi-native-fbank ``FbankOptions`` with the recipe's options (streaming runtime).

    ``options`` has the keys of :data:`FBANK_OPTIONS` (default: those); the
    runtime passes the values an exported encoder carries in its metadata
    (:func:`options_from_metadata`).
    """
    import kaldi_native_fbank as knf

    o = FBANK_OPTIONS if options is None else options
    opts = knf.FbankOptions()
    opts.frame_opts.samp_freq = float(o["sampling_rate"])
    opts.frame_opts.frame_shift_ms = o["frame_shift_ms"]
    opts.frame_opts.frame_length_ms = o["frame_length_ms"]
    opts.frame_opts.dither = o["dither"]
    opts.frame_opts.snip_edges = o["snip_edges"]
    opts.frame_opts.preemph_coeff = o["preemph_coeff"]
    opts.frame_opts.remove_dc_offset = o["remove_dc_offset"]
    opts.frame_opts.window_type = o["window_type"]
    opts.frame_opts.round_to_power_of_two = o["round_to_power_of_two"]
    opts.mel_opts.num_bins = o["num_mel_bins"]
    opts.mel_opts.low_freq = o["low_freq"]
    opts.mel_opts.high_freq = o["high_freq"]
    opts.energy_floor = o["energy_floor"]
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
            raise ValueError(f"encoder metadata lacks fbank_{k}: was it exported by export/export_onnx.py?")
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
