"""LibriSpeech + LibriSpeech-PC preparation on a tiny fixture tree."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import soundfile as sf
from conftest import write_librispeech_tree

ROOT = Path(__file__).resolve().parents[2]

# (utt id, LibriSpeech transcript, LibriSpeech-PC text or None if PC dropped it)
UTTS = {
    "test-clean": [
        ("1089-134686-0000", "HE HOPED THERE WOULD BE STEW FOR DINNER TURNIPS AND CARROTS",
         "He hoped there would be stew for dinner, turnips and carrots."),
        ("1089-134686-0001", "STUFF IT INTO YOU HIS BELLY COUNSELLED HIM",
         "Stuff it into you, his belly counselled him."),
        ("1089-134686-0002", "MISTER QUILTER IS THE APOSTLE OF THE MIDDLE CLASSES", None),
    ],
    "dev-clean": [
        ("1272-128104-0000", "MISTER QUILTER IS THE APOSTLE OF THE MIDDLE CLASSES",
         "Mr. Quilter is the apostle of the middle classes, and we are glad to welcome his gospel?"),
    ],
}


def make_fixture(root: Path) -> tuple:
    rng = np.random.default_rng(0)

    def noise(path, utt_id, text):
        sf.write(path, (0.1 * rng.standard_normal(16000)).astype(np.float32), 16000)

    corpus, pc_dir = write_librispeech_tree(root, UTTS, noise)
    with open(pc_dir / "test-clean.json", "a") as f:
        f.write("{not json\n")  # a malformed line: counted, not fatal
    return corpus, pc_dir


def test_librispeech_pc_join(tmp_path):
    from lhotse import load_manifest

    corpus, pc_dir = make_fixture(tmp_path)
    out = tmp_path / "manifests"
    r = subprocess.run([sys.executable, str(ROOT / "local" / "prepare_librispeech.py"), "--corpus-dir", str(corpus),
                        "--pc-dir", str(pc_dir), "--output-dir", str(out), "--parts", "test-clean,dev-clean"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    sups = {s.id: s for s in load_manifest(out / "librispeech_supervisions_test-clean.jsonl.gz")}
    assert sups["1089-134686-0000"].text == "he hoped there would be stew for dinner turnips and carrots"
    assert sups["1089-134686-0000"].custom["text_p"] == "He hoped there would be stew for dinner, turnips and carrots."
    # dropped by LibriSpeech-PC: N only
    assert sups["1089-134686-0002"].text == "mister quilter is the apostle of the middle classes"
    assert not (sups["1089-134686-0002"].custom or {}).get("text_p")
    dev = list(load_manifest(out / "librispeech_supervisions_dev-clean.jsonl.gz"))
    # N comes from LibriSpeech ("MISTER"), P from LibriSpeech-PC ("Mr.")
    assert dev[0].text.startswith("mister quilter")
    assert dev[0].custom["text_p"].startswith("Mr. Quilter")
    report = json.loads((out / "pc_join.json").read_text())
    assert report["malformed_pc_lines"] == 1
    assert report["parts"]["test-clean"] == {"utterances": 3, "with_p": 2, "without_p": 1}
    assert (out / "librispeech_recordings_test-clean.jsonl.gz").exists()


def test_missing_part_is_a_clear_error(tmp_path):
    corpus, pc_dir = make_fixture(tmp_path)
    r = subprocess.run([sys.executable, str(ROOT / "local" / "prepare_librispeech.py"), "--corpus-dir", str(corpus),
                        "--pc-dir", str(pc_dir), "--output-dir", str(tmp_path / "m"), "--parts", "train-other-500"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode != 0
    assert "train-other-500" in r.stderr and "Traceback" not in r.stderr
