"""Training features (lhotse Fbank) and streaming features (kaldi-native-fbank) agree."""

import numpy as np
import pytest

from zipformer_pc.features import FBANK_OPTIONS, SILENCE_LOG_MEL, TAIL_SILENCE_FRAMES, encoder_frames, knf_fbank, \
    lhotse_fbank, num_frames, tail_padded_frames


def _speechlike(seconds: float, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(int(16000 * seconds)) / 16000
    f0 = 120 + 30 * np.sin(2 * np.pi * 0.7 * t)
    x = sum(np.sin(2 * np.pi * k * np.cumsum(f0) / 16000) / k for k in range(1, 12))
    x = x * (0.5 + 0.5 * np.sin(2 * np.pi * 2.5 * t)) + 0.01 * rng.standard_normal(len(t))
    return (0.3 * x / np.abs(x).max()).astype(np.float32)


@pytest.mark.parametrize("seconds", [0.05, 1.0, 2.37])
def test_lhotse_and_kaldi_native_fbank_agree(seconds):
    x = _speechlike(seconds)
    a = lhotse_fbank().extract(x, 16000)
    b = knf_fbank(x)
    assert a.shape == b.shape == (num_frames(len(x)), 80)
    np.testing.assert_allclose(a, b, atol=2e-3, rtol=0)


def test_feature_options_are_the_sherpa_onnx_ones():
    # sherpa-onnx's OnlineRecognizer.from_transducer computes fbank with these.
    assert FBANK_OPTIONS["num_mel_bins"] == 80
    assert FBANK_OPTIONS["low_freq"] == 20.0
    assert FBANK_OPTIONS["high_freq"] == -400.0
    assert FBANK_OPTIONS["dither"] == 0.0
    assert FBANK_OPTIONS["snip_edges"] is False


def test_scale_matters_so_samples_must_be_in_unit_range():
    x = _speechlike(0.5)
    # int16-scaled input shifts every log-mel value by log(32768**2) ~ 20.79:
    # a reminder that both sides must feed samples in [-1, 1].
    diff = knf_fbank(x * 32768) - knf_fbank(x)
    np.testing.assert_allclose(diff, 2 * np.log(32768), atol=1e-2)


def test_encoder_frames_is_the_encoders_count():
    import torch

    from zipformer_pc.model.zipformer import ZipformerEncoder

    frames = torch.arange(0, 400)
    assert ZipformerEncoder.output_lengths(frames).tolist() == [encoder_frames(int(t)) for t in frames]


def test_silence_is_what_both_libraries_compute_for_zeros():
    np.testing.assert_allclose(knf_fbank(np.zeros(8000, np.float32)), SILENCE_LOG_MEL, atol=1e-5)
    np.testing.assert_allclose(lhotse_fbank().extract(np.zeros(8000, np.float32), 16000), SILENCE_LOG_MEL, atol=1e-5)


@pytest.mark.parametrize("chunk", [16, 32, 64])
def test_tail_padded_frames_fill_whole_chunks_with_the_least_silence(chunk):
    import torch

    from zipformer_pc.model.zipformer import Conv2dSubsampling, ZipformerEncoder

    for n in range(0, 400):
        t = tail_padded_frames(n, chunk)
        assert t >= n + TAIL_SILENCE_FRAMES
        # whole chunks at the front end's 50 Hz rate, the last one's look-ahead included
        assert int(Conv2dSubsampling.output_lengths(torch.tensor(t))) % chunk == 0
        assert (t - 7) % (2 * chunk) == 0
        assert t - 2 * chunk < n + TAIL_SILENCE_FRAMES  # one chunk fewer would not hold the silence
        assert encoder_frames(t) == int(ZipformerEncoder.output_lengths(torch.tensor(t)))
    assert tail_padded_frames(100, -1) == 100 + TAIL_SILENCE_FRAMES  # full context: the silence only


def test_add_tail_silence_overwrites_batch_padding_and_counts_the_silence():
    import torch

    from zipformer_pc.model.zipformer import add_tail_silence

    x = torch.randn(2, 50, 4)
    lens = torch.tensor([50, 20])
    x[1, 20:] = -23.0  # lhotse's batch padding
    y, new = add_tail_silence(x, lens, 16)
    assert new.tolist() == [tail_padded_frames(50, 16), tail_padded_frames(20, 16)]
    assert y.size(1) == int(new.max())
    assert torch.equal(y[0, :50], x[0]) and torch.equal(y[1, :20], x[1, :20])
    assert bool((y[1, 20:] == SILENCE_LOG_MEL).all()) and bool((y[0, 50:] == SILENCE_LOG_MEL).all())


def test_every_option_reaches_both_libraries():
    from zipformer_pc.features import OPTION_NAMES

    assert set(OPTION_NAMES) == set(FBANK_OPTIONS)
