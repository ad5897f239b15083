"""MUSAN for LibriSpeech: local/prepare_musan.py on a fake archive served from file:// and
from a local path (nothing is downloaded in tests), prepare.sh's stage 7, and the training
dataset mixing its noise into cuts (zipformer_pc.data.musan)."""

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
RATE = 16000


def write_wav(path: Path, seconds: float, seed: int, rate: int = RATE) -> None:
    import soundfile as sf

    path.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    sf.write(path, (0.1 * rng.standard_normal(int(rate * seconds))).astype(np.float32), rate)


def fake_musan(tmp_path: Path) -> Path:
    """musan.tar.gz in MUSAN's layout: two noises (12 s and 3 s), one 25 s piece of music at
    8 kHz, one speech file (to be left out)."""
    src = tmp_path / "src"
    write_wav(src / "musan/noise/free-sound/noise-free-sound-0000.wav", 12.0, 1)
    write_wav(src / "musan/noise/free-sound/noise-free-sound-0001.wav", 3.0, 2)
    write_wav(src / "musan/music/fma/music-fma-0000.wav", 25.0, 3, rate=8000)
    write_wav(src / "musan/speech/librivox/speech-librivox-0000.wav", 8.0, 4)
    (src / "musan/music/fma/ANNOTATIONS").write_text("music-fma-0000 classical N someone\n")
    tgz = tmp_path / "musan.tar.gz"
    with tarfile.open(tgz, "w:gz") as tar:
        tar.add(src / "musan", arcname="musan")
    return tgz


def prepare(dl: Path, out: Path, url: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, str(ROOT / "local" / "prepare_musan.py"), "--dl-dir", str(dl),
                           "--output-dir", str(out), "--url", url], capture_output=True, text=True, env=env,
                          timeout=300)


def test_musan_is_downloaded_unpacked_and_windowed_without_speech(tmp_path):
    from lhotse import load_manifest

    tgz = fake_musan(tmp_path)
    dl, out = tmp_path / "download", tmp_path / "data" / "musan"
    r = prepare(dl, out, tgz.as_uri())  # file:///...: the download path, served locally
    assert r.returncode == 0, r.stderr[-3000:]
    assert (dl / "musan.tar.gz").is_file() and (dl / ".musan_unpacked").is_file()
    assert not list(dl.glob("*.part"))
    cuts = load_manifest(out / "musan_cuts.jsonl.gz")
    # noise: 12 s -> one 10 s window (the 2 s rest and the 3 s file are dropped); music: 10 + 10 + 5 s
    assert sorted(round(c.duration, 2) for c in cuts) == [5.0, 10.0, 10.0, 10.0]
    assert all(c.sampling_rate == RATE and not c.has_features for c in cuts)
    assert not any("speech" in c.recording_id for c in cuts)
    report = json.loads((out / "musan.json").read_text())
    assert report["parts"]["noise"] == {"files": 2, "windows": 1, "hours": round(10 / 3600, 3)}
    assert report["parts"]["music"]["windows"] == 3
    audio = cuts[0].load_audio()
    assert audio.shape[1] == round(cuts[0].duration * RATE)

    # present: not fetched again (the URL is not even looked at)
    r = prepare(dl, out, "file:///no/such/musan.tar.gz")
    assert r.returncode == 0 and "MUSAN present" in r.stderr

    # a local path works as the URL
    r = prepare(tmp_path / "dl2", tmp_path / "out2", str(tgz))
    assert r.returncode == 0, r.stderr[-3000:]
    assert len(load_manifest(tmp_path / "out2" / "musan_cuts.jsonl.gz")) == 4


def test_prepare_sh_stage_7_makes_the_musan_cuts_once(tmp_path):
    tgz = fake_musan(tmp_path)
    data, dl = tmp_path / "data", tmp_path / "download"
    cmd = ["bash", "prepare.sh", "--dataset", "librispeech", "--stage", "7", "--stop-stage", "7", "--musan", "true",
           "--musan-url", str(tgz), "--data-dir", str(data), "--dl-dir", str(dl), "--parts", "dev-clean,train-clean-100"]
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert (data / "musan" / "musan_cuts.jsonl.gz").is_file()
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "Stage 7 (musan): already done" in r.stdout
    r = subprocess.run(cmd[:9] + ["maybe"] + cmd[10:], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "--musan must be true or false" in r.stderr


@pytest.fixture(scope="module")
def speech_and_noise(tmp_path_factory):
    """Two speech cuts with stored fbank features (the recipe's config) and the noise cuts of the fake MUSAN."""
    from lhotse import CutSet, LilcomChunkyWriter, Recording, SupervisionSegment

    from zipformer_pc.features import lhotse_fbank

    tmp = tmp_path_factory.mktemp("musan_mix")
    tgz = fake_musan(tmp)
    r = prepare(tmp / "download", tmp / "musan", str(tgz))
    assert r.returncode == 0, r.stderr[-2000:]
    cuts = []
    for i, seconds in enumerate((2.0, 1.5)):
        write_wav(tmp / f"utt{i}.wav", seconds, 10 + i)
        rec = Recording.from_file(tmp / f"utt{i}.wav", recording_id=f"utt{i}")
        cut = rec.to_cut()
        cut.supervisions = [SupervisionSegment(id=f"utt{i}", recording_id=f"utt{i}", start=0.0, duration=seconds,
                                               text="hello world", custom={"text_p": "Hello world."})]
        cuts.append(cut)
    with LilcomChunkyWriter(tmp / "feats") as w:
        cuts = [c.compute_and_store_features(lhotse_fbank(), w) for c in cuts]
    return CutSet.from_cuts(cuts), tmp / "musan" / "musan_cuts.jsonl.gz"


def dataset(musan):
    from zipformer_pc.data.dataset import PCAsrDataset
    from zipformer_pc.data.tokenizer import Tokenizer

    return PCAsrDataset(Tokenizer(str(ROOT / "egs/synth/pretrained/bpe.model")), musan=musan)


def test_the_training_cuts_get_musan_mixed_in_reproducibly(speech_and_noise):
    from lhotse.dataset.collation import collate_features

    from zipformer_pc.data.musan import MusanMixer, needs_audio, parse_snr

    cuts, noise = speech_and_noise
    clean, clean_lens = collate_features(cuts.sort_by_duration(ascending=False))

    never = dataset(MusanMixer(noise, prob=0.0))[cuts]
    assert torch.equal(never["features"], clean) and torch.equal(never["feature_lens"], clean_lens)

    mixer = MusanMixer(noise, prob=1.0, snr=(10, 20), seed=1)
    mixed_cuts = mixer(cuts, epoch=1)
    assert [c.id for c in mixed_cuts] == [c.id for c in cuts]  # ids, durations and references kept
    assert [c.duration for c in mixed_cuts] == [c.duration for c in cuts]
    assert all(needs_audio(c) for c in mixed_cuts) and not any(needs_audio(c) for c in cuts)
    ds = dataset(mixer)
    ds.set_epoch(1)
    a = ds[cuts]
    assert torch.equal(a["feature_lens"], clean_lens) and a["features"].shape == clean.shape
    assert a["texts_p"] == ["Hello world.", "Hello world."] and a["cut_ids"] == never["cut_ids"]
    # noise at 10-20 dB raises the quiet bins: the features differ from the clean ones, by a bounded amount
    diff = (a["features"] - clean).abs()
    assert float(diff.mean()) > 0.01 and float(diff.mean()) < 5.0
    assert torch.equal(ds[cuts]["features"], a["features"])  # same seed, epoch and batch: the same mix
    ds.set_epoch(2)
    assert not torch.equal(ds[cuts]["features"], a["features"])  # another epoch: another draw

    assert parse_snr("10,20") == (10.0, 20.0) and parse_snr("15") == (15.0, 15.0)
    with pytest.raises(ValueError):
        parse_snr("20,10")


def test_musan_composes_with_the_augmentation(speech_and_noise, tmp_path):
    """--augment and --musan-cuts together: the augmentation first (its babble reads the batch's
    plain cuts), MUSAN mixed into what it made; every cut's features come from its audio."""
    from zipformer_pc.data.augment import Augmenter, parse_augment
    from zipformer_pc.data.musan import MusanMixer

    cuts, noise = speech_and_noise
    augment = Augmenter(parse_augment("reverb=0,noise=1,babble=1,phone=1,codec=0"), tmp_path / "pool", seed=1)
    ds = dataset(MusanMixer(noise, prob=1.0))
    ds.augment = augment
    b = ds[cuts]
    alone = dataset(None)
    alone.augment = augment
    a = alone[cuts]
    assert ds.augment_failures == 0 and torch.isfinite(b["features"]).all()
    assert torch.equal(b["feature_lens"], a["feature_lens"]) and not torch.equal(b["features"], a["features"])


def test_train_py_mixes_musan_and_checks_for_inf_on_a_cpu(speech_and_noise, tmp_path):
    """train.py wired up: --musan-cuts mixes noise into the training batches, --inf-check true
    hooks the model, --scan-oom true is skipped on a CPU with a message, and the sampler options
    reach the run; two batches of the tiny model."""
    cuts, noise = speech_and_noise
    manifest = tmp_path / "cuts.jsonl.gz"
    cuts.to_file(manifest)
    exp = tmp_path / "exp"
    cmd = [sys.executable, "-m", "zipformer_pc.training.train", "--train-cuts", str(manifest), "--valid-cuts",
           str(manifest), "--bpe-model", str(ROOT / "egs/synth/pretrained/bpe.model"), "--exp-dir", str(exp),
           "--encoder", "tiny", "--model-type", "norm", "--num-epochs", "1", "--max-batches", "2",
           "--max-duration", "2.5", "--musan-cuts", str(noise), "--musan-prob", "1.0", "--inf-check", "true",
           "--scan-oom", "true", "--num-buckets", "1", "--bucket-buffer-size", "100", "--tensorboard", "false",
           "--num-threads", "1", "--valid-at-epoch-end", "false"]
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 0, r.stderr[-3000:]
    assert "MUSAN: 4 noise/music cuts" in r.stderr and "mixed into 1 of the training cuts" in r.stderr
    assert "--inf-check: every module's output and gradient are checked" in r.stderr
    assert "--scan-oom: skipped on a CPU" in r.stderr
    assert (exp / "checkpoint-2.pt").is_file()
    for opt, value in (("--musan-snr", "20,10"), ("--musan-prob", "2")):  # refused before anything runs
        r = subprocess.run(cmd + [opt, value, "--exp-dir", str(tmp_path / "refused")], cwd=ROOT,
                           capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
        assert r.returncode != 0 and opt in r.stderr
