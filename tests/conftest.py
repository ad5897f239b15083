"""Shared fixtures: the tiny synthetic corpus, built once per test session."""

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def tiny_corpus(tmp_path_factory) -> Path:
    """``prepare.sh --size tiny`` into a temporary data dir; returns DATA_DIR/synth."""
    data_dir = tmp_path_factory.mktemp("tiny_data")
    r = subprocess.run(
        ["bash", "prepare.sh", "--size", "tiny", "--data-dir", str(data_dir)],
        cwd=ROOT, capture_output=True, text=True, timeout=900,
    )
    assert r.returncode == 0, f"prepare.sh --size tiny failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return data_dir / "synth"


# Epochs for the decoding / export fixture model (its outputs need not be good:
# the tests check mechanics, not accuracy).
TRAINED_EPOCHS = 2


@pytest.fixture(scope="session")
def trained_tiny_model(tiny_corpus, tmp_path_factory):
    """A tiny conditioned model trained on the tiny corpus; returns (exp_dir, last epoch)."""
    import sys

    exp_dir = tmp_path_factory.mktemp("trained_tiny")
    cmd = [
        sys.executable, "-m", "zipformer_pc.training.train", "--exp-dir", str(exp_dir),
        "--train-cuts", str(tiny_corpus / "fbank" / "synth_cuts_train_p1.jsonl.gz"),
        "--valid-cuts", str(tiny_corpus / "fbank" / "synth_cuts_dev.jsonl.gz"),
        "--bpe-model", str(tiny_corpus / "lang_bpe_120" / "bpe.model"),
        "--model-type", "conditioned", "--num-epochs", str(TRAINED_EPOCHS), "--max-duration", "60",
        "--spec-augment", "false", "--warmup-batches", "20", "--lr-batches", "1000", "--lr-epochs", "100",
        "--save-every-n", "100000", "--valid-interval", "100000", "--average-period", "1",
        "--tensorboard", "false", "--log-interval", "1000",
    ]
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=1800)
    assert r.returncode == 0, r.stderr[-4000:]
    return exp_dir, TRAINED_EPOCHS
