"""benchmarks/mix_grid.py: mixes of fine-tuned runs with their start, measured against the reference export
and picked by the rule "not worse on any figure, then the lowest PC-WER"."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conftest import benchmark_module

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "egs/synth/pretrained"
mix_grid = benchmark_module("mix_grid")


def _row(dev, dev_ood):
    return {"dev": dict(zip(("wer", "pc_wer", "per"), dev)), "dev_ood": dict(zip(("wer", "pc_wer", "per"), dev_ood))}


def test_the_pick_is_the_lowest_pc_wer_among_mixes_not_worse_anywhere():
    rows = {mix_grid.REFERENCE: _row((2.5, 5.6, 15.7), (43.7, 47.1, 37.8)),
            "1": _row((2.0, 5.0, 15.0), (43.0, 46.0, 37.9)),  # PER of dev_ood 0.1 worse: fails
            "0.7": _row((2.5, 5.5, 15.7), (43.7, 47.0, 37.8)),  # level or better everywhere
            "0.5": _row((2.4, 5.4, 15.6), (43.6, 46.9, 37.7)),  # better everywhere, lowest PC-WER sum
            "0.3": _row((2.4, 5.0, 15.6), (43.6, None, 37.7))}  # a missing figure never passes
    ref = rows[mix_grid.REFERENCE]
    assert [n for n in rows if n != mix_grid.REFERENCE and mix_grid.passes(rows[n], ref)] == ["0.7", "0.5"]
    assert mix_grid.pick(rows) == "0.5"
    del rows["0.5"], rows["0.7"]
    assert mix_grid.pick(rows) is None
    table = mix_grid.table(rows, None)
    assert "| 1 | 2.00 / 5.00 / 15.00 | 43.00 / 46.00 / 37.90 | no |" in table


def test_weight_sets_and_sets_are_checked():
    assert mix_grid.parse_weights(["0.7", "1"], 1) == [(0.7,), (1.0,)]
    assert mix_grid.parse_weights(["0.4,0.2"], 2) == [(0.4, 0.2)]
    for bad, runs, msg in [(["0.4"], 2, "1 weight"), (["0.7,0.5"], 2, "sum to at most 1"), (["-0.1"], 1, "within"),
                           (["a"], 1, "not a comma-separated"), (["0.5", "0.5"], 1, "twice")]:
        with pytest.raises(SystemExit, match=msg):
            mix_grid.parse_weights(bad, runs)
    with pytest.raises(SystemExit, match="NAME=MANIFEST"):
        mix_grid.parse_sets(["dev.jsonl.gz"])
    with pytest.raises(SystemExit, match="does not exist"):
        mix_grid.parse_sets(["dev=/nonexistent/dev.jsonl.gz"])


def _fake_run(exp: Path, model: dict, config: dict, batches: int = 10) -> None:
    """A fine-tuning run's one checkpoint whose running mean is ``model`` (--iter B --avg 1: these weights)."""
    exp.mkdir(parents=True)
    torch.save({"model": model, "model_avg": model, "model_avg_batches": batches, "batch_idx_train": batches,
                "optimizer_steps": batches, "model_config": config, "args": {"keep_last_k": 0}},
               exp / f"checkpoint-{batches}.pt")


def test_mixes_of_the_shipped_weights_are_measured_against_the_shipped_export(tiny_corpus, tmp_path):
    shipped = torch.load(SHIPPED / "conditioned.pt", map_location="cpu", weights_only=False)
    same = {k: v.float() if v.is_floating_point() else v for k, v in shipped["model"].items()}
    g = torch.Generator().manual_seed(0)
    noisy = {k: v + v.std().nan_to_num() * torch.randn(v.shape, generator=g) if v.is_floating_point() and v.numel() > 1
             else v for k, v in same.items()}
    _fake_run(tmp_path / "noisy", noisy, shipped["model_config"])
    _fake_run(tmp_path / "same", same, shipped["model_config"])
    fbank = tiny_corpus / "fbank"
    out = tmp_path / "grid.json"
    cmd = [sys.executable, "benchmarks/mix_grid.py", "--exp-dir", str(tmp_path / "noisy"), str(tmp_path / "same"),
           "--iter", "10", "10", "--weights", "1,0", "0,1", "--start", str(SHIPPED / "conditioned.pt"),
           "--cuts", f"dev={fbank / 'synth_cuts_dev.jsonl.gz'}", f"test={fbank / 'synth_cuts_test.jsonl.gz'}",
           "--max-utts", "4", "--work-dir", str(tmp_path / "work"), "--output-json", str(out)]
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(out.read_text())
    rows = res["rows"]
    assert list(rows) == [mix_grid.REFERENCE, "1/0", "0/1"]
    ref = rows[mix_grid.REFERENCE]
    # the shipped export transcribes the tiny corpus's in-domain voices: a figure random weights cannot give
    assert ref["dev"]["wer"] < 50 and ref["test"]["wer"] < 50
    # the noised run alone is far worse and does not pass; the shipped weights alone (fp16 -> fp32) read
    # as the shipped export does, within a word or two
    assert rows["1/0"]["dev"]["wer"] > ref["dev"]["wer"] + 20
    assert not mix_grid.passes(rows["1/0"], ref)
    assert abs(rows["0/1"]["dev"]["wer"] - ref["dev"]["wer"]) < 5
    assert res["pick"] in (None, "0/1")
    assert res["search"]["decoding_method"] == "modified_beam_search" and res["search"]["lm_scale"] > 0
    onnx = tmp_path / "work" / "mix-0-1" / "onnx"
    assert {"lm-P.arpa.gz", "lm-N.arpa.gz", "questions.json.gz"} <= {p.name for p in onnx.iterdir()}
    ck = torch.load(tmp_path / "work" / "mix-1-0" / "model" / "checkpoint-10.pt", map_location="cpu",
                    weights_only=False)
    assert ck["interpolated"]["weights"] == [1.0, 0.0]
    assert "| 1/0 |" in r.stdout and "Pick:" in r.stdout
