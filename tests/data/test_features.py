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


# ------------------------------------------------- vocal tract length perturbation


def test_warp_frequencies_moves_the_bins_below_the_knee_and_keeps_both_ends():
    import torch

    from zipformer_pc.data.dataset import warp_frequencies

    ramp = torch.arange(80, dtype=torch.float32).repeat(3, 1)  # (T, F): each bin holds its own index
    assert warp_frequencies(ramp, 1.0) is ramp
    for alpha in (0.9, 1.1):
        out = warp_frequencies(ramp, alpha)
        assert out.shape == ramp.shape
        knee_out = alpha * 0.8 * 79 * min(1.0, 1.0 / alpha)
        below = torch.arange(80) <= knee_out
        # what bin x held is now at bin alpha * x: bin f reads f / alpha
        torch.testing.assert_close(out[0, below], torch.arange(80)[below].float() / alpha)
        assert out[0, 0] == 0 and out[0, 79] == 79
        assert (out[0].diff() > 0).all()  # one line to the knee, another after it: still increasing
    peak = torch.zeros(1, 80)
    peak[0, 20] = 1.0
    assert warp_frequencies(peak, 1.1).argmax() == 22 and warp_frequencies(peak, 0.9).argmax() == 18
    for alpha, cutoff in ((0.0, 0.8), (-1.0, 0.8), (1.1, 1.0), (1.1, 0.0)):
        with pytest.raises(ValueError):
            warp_frequencies(peak, alpha, cutoff)


def _feature_cuts(tmp_path, n: int):
    from lhotse import CutSet, MonoCut, Recording, SupervisionSegment

    from conftest import speech_like, write_wav

    cuts = []
    for i in range(n):
        wav = tmp_path / f"u{i}.wav"
        write_wav(wav, speech_like(1.0 + 0.2 * i, seed=i))
        rec = Recording.from_file(wav, recording_id=f"u{i}")
        sup = SupervisionSegment(id=f"u{i}", recording_id=f"u{i}", start=0, duration=rec.duration, text="a b")
        cuts.append(MonoCut(id=f"u{i}", start=0, duration=rec.duration, channel=0, recording=rec,
                            supervisions=[sup]))
    return CutSet.from_cuts(cuts).compute_and_store_features(lhotse_fbank(), storage_path=tmp_path / "feats")


def test_the_training_warp_is_drawn_per_cut_from_seed_and_epoch(tmp_path):
    import torch

    from zipformer_pc.data.dataset import PCAsrDataset
    from zipformer_pc.data.tokenizer import Tokenizer

    tok = Tokenizer("egs/synth/pretrained/bpe.model")
    cuts = _feature_cuts(tmp_path, 3)
    plain = PCAsrDataset(tok)[cuts]
    warped = PCAsrDataset(tok, freq_warp=0.1, seed=7)
    a = warped[cuts]
    assert a["cut_ids"] == plain["cut_ids"]
    for i, n in enumerate(a["feature_lens"].tolist()):
        x, y = plain["features"][i, :n], a["features"][i, :n]
        assert not torch.equal(x, y)
        assert abs(x.mean() - y.mean()) < 1.0  # the same sound, its spectrum moved, not a new one
    # a cut's warp depends on the seed, the epoch and its id only, not on the batch it is read in
    # (a resumed run, whose batches may differ, draws what the uninterrupted one did)
    alone = warped[cuts.subset(cut_ids=["u1"])]
    i = a["cut_ids"].index("u1")
    torch.testing.assert_close(alone["features"][0], a["features"][i, : alone["features"].shape[1]])
    assert torch.equal(PCAsrDataset(tok, freq_warp=0.1, seed=7)[cuts]["features"], a["features"])
    other_seed = PCAsrDataset(tok, freq_warp=0.1, seed=8)[cuts]["features"]
    warped.set_epoch(1)
    assert not torch.equal(warped[cuts]["features"], a["features"])
    assert not torch.equal(other_seed, a["features"])
    for bad in (-0.1, 0.5):
        with pytest.raises(ValueError, match="freq_warp"):
            PCAsrDataset(tok, freq_warp=bad)
