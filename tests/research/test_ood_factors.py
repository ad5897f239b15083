"""research/ood_factors.py: the 2 x 2 table of voices x text behind test_ood, with the shipped model."""

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import local_module

ROOT = Path(__file__).resolve().parents[2]
tts = local_module("tts")
KOKORO_OOD_VOICES, OOD_VOICES, TRAIN_VOICES = tts.KOKORO_OOD_VOICES, tts.OOD_VOICES, tts.TRAIN_VOICES

HAVE_KOKORO = not tts.missing_tools(KOKORO_OOD_VOICES)[0]


def first_texts(path: Path, n: int):
    return [json.loads(line) for line in path.read_text().splitlines()[:n]]


@pytest.mark.slow
def test_ood_factors_fills_the_two_missing_cells(tiny_corpus, tmp_path):
    out = tmp_path / "f.json"
    work = tmp_path / "work"
    cmd = [sys.executable, "research/ood_factors.py", "--data-dir", str(tiny_corpus), "--num-utts", "3",
           "--work-dir", str(work), "--json", str(out), "--kokoro", "true" if HAVE_KOKORO else "false"]
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(out.read_text())
    kokoro = {"voices_kokoro"} if HAVE_KOKORO else set()
    assert set(res["cells"]) == {"test", "voices_ood", "text_ood", "test_ood"} | kokoro
    assert all(c["utts"] == 3 for c in res["cells"].values())
    # the shipped model transcribes the in-domain voices on Austen: a figure random weights cannot give
    assert res["cells"]["test"]["wer"] < 50
    # who reads what: the synthesized cells swap the voices of test and test_ood, not the texts
    ood, ind = {v.name for v in OOD_VOICES}, {v.name for v in TRAIN_VOICES}
    assert set(res["voices"]["voices_ood"]) <= ood and set(res["voices"]["test_ood"]) <= ood
    assert set(res["voices"]["text_ood"]) <= ind and set(res["voices"]["test"]) <= ind
    with gzip.open(work / "manifests" / "synth_supervisions_text_ood.jsonl.gz", "rt") as f:
        sups = [json.loads(line) for line in f]
    ood_texts = [u["text_raw"] for u in first_texts(tiny_corpus / "text/test_ood.jsonl", 3)]
    assert [s["custom"]["text_raw"] for s in sups] == ood_texts
    with gzip.open(work / "manifests" / "synth_supervisions_voices_ood.jsonl.gz", "rt") as f:
        sups = [json.loads(line) for line in f]
    test_texts = [u["text_raw"] for u in first_texts(tiny_corpus / "text/test.jsonl", 3)]
    assert [s["custom"]["text_raw"] for s in sups] == test_texts
    if HAVE_KOKORO:  # the held-out Kokoro speakers read the same Austen texts
        assert set(res["voices"]["voices_kokoro"]) <= {v.name for v in KOKORO_OOD_VOICES}
        with gzip.open(work / "manifests" / "synth_supervisions_voices_kokoro.jsonl.gz", "rt") as f:
            assert [json.loads(line)["custom"]["text_raw"] for line in f] == test_texts
        assert "by the Kokoro voices" in r.stdout
    for cell in ("test", "voices_ood", "text_ood", "test_ood", *kokoro):
        assert f"| {cell} |" in r.stdout
    assert "WER added by the text" in r.stdout
    # the unseen-word table splits each cell's WER exactly: seen words + unseen words + insertions
    assert res["train_text"] == [str(tiny_corpus / "text/train.jsonl")]
    for cell, u in res["unseen_words"].items():
        assert u["seen_points"] + u["unseen_points"] + u["insertion_points"] == pytest.approx(res["cells"][cell]["wer"])
        assert f"| {cell} | {u['words']} |" in r.stdout
    # a second run reuses the audio of the first; with test's own text as the training text, no word of
    # the Austen cells is unseen, and the figures do not move
    before = sorted(p.stat().st_mtime_ns for p in (work / "audio").rglob("*.flac"))
    r = subprocess.run(cmd + ["--train-text", str(tiny_corpus / "text/test.jsonl")], cwd=ROOT, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert sorted(p.stat().st_mtime_ns for p in (work / "audio").rglob("*.flac")) == before
    res2 = json.loads(out.read_text())
    assert res2["cells"] == res["cells"]
    for cell in ("test", "voices_ood", *kokoro):
        assert res2["unseen_words"][cell]["unseen_pct"] == 0
    assert res2["unseen_words"]["test_ood"]["unseen_pct"] > 0  # Moby Dick's words are not all Austen's


def corpus_stub(tmp_path: Path) -> Path:
    """A data dir with the test manifests the script looks for first (empty: the tests below stop
    before reading them), in place of the tiny corpus."""
    data = tmp_path / "synth"
    (data / "fbank").mkdir(parents=True)
    for name in ("test", "test_ood"):
        (data / "fbank" / f"synth_cuts_{name}.jsonl.gz").touch()
    return data


def test_ood_factors_names_a_missing_training_text(tmp_path):
    r = subprocess.run([sys.executable, "research/ood_factors.py", "--data-dir", str(corpus_stub(tmp_path)),
                        "--train-text", str(tmp_path / "nope.jsonl")], cwd=ROOT, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode != 0 and "nope.jsonl not found" in r.stderr


def test_ood_factors_names_a_training_text_line_that_is_not_an_utterance(tmp_path):
    bad = tmp_path / "train.jsonl"
    bad.write_text('{"id": "train-000000", "text_raw": "Call me Ishmael."}\n{"id": "train-000001"}\n')
    r = subprocess.run([sys.executable, "research/ood_factors.py", "--data-dir", str(corpus_stub(tmp_path)),
                        "--train-text", str(bad)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode != 0
    assert f"{bad}:2: not an utterance" in r.stderr and "Traceback" not in r.stderr


def test_ood_factors_names_a_missing_corpus(tmp_path):
    r = subprocess.run([sys.executable, "research/ood_factors.py", "--data-dir", str(tmp_path)],
                       cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "prepare.sh" in r.stderr
