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
