"""benchmarks/learning_curve.py and the time-based checkpoints of train.py it relies on (tiny corpus)."""

import csv
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "learning_curve.py"


def lc(*args, timeout=900):
    r = subprocess.run([sys.executable, str(SCRIPT), *args], cwd=ROOT, capture_output=True, text=True,
                       timeout=timeout)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    return r


def test_learning_curve_trains_for_its_budget_then_scores_each_checkpoint(tiny_corpus, tmp_path):
    exp = tmp_path / "lc"
    # 0.3 min of training with a checkpoint every 0.1 min; tiny batches so there are several
    r = lc("run", "--data-dir", str(tiny_corpus), "--exp-dir", str(exp), "--minutes", "0.3", "--eval-every", "0.1",
           "--num-threads", "1", "--", "--max-duration", "20", "--log-interval", "1000")
    ckpts = sorted(exp.glob("checkpoint-*.pt"), key=lambda p: int(p.stem.split("-")[1]))
    assert len(ckpts) >= 3, [p.name for p in ckpts]
    states = [torch.load(p, weights_only=False, map_location="cpu") for p in ckpts]
    minutes = [s["train_seconds"] / 60 for s in states]
    assert minutes == sorted(minutes) and 0.3 <= minutes[-1] < 0.3 + 0.2, minutes
    assert all(s["model_avg_batches"] == s["batch_idx_train"] for s in states)
    with open(exp / "learning_curve.csv") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["batch"]) for r in rows] == [s["batch_idx_train"] for s in states]
    for row in rows:
        for k in ("wer", "pc_wer", "per", "minutes", "audio_hours", "valid_loss_n"):
            assert row[k] not in ("", None) and float(row[k]) >= 0, (k, row)
    assert (exp / "learning_curve.png").stat().st_size > 1000
    assert "min to WER 20%" in r.stdout and "| batch |" in r.stdout
    # each checkpoint is scored on the mean weights since the previous one
    cache = (exp / "curve.json").read_text()
    first, second = states[0]["batch_idx_train"], states[1]["batch_idx_train"]
    assert f'"1..{first}"' in cache and f'"{first + 1}..{second}"' in cache

    # a second call trains no more (the budget is spent) and scores from the cache
    again = lc("run", "--data-dir", str(tiny_corpus), "--exp-dir", str(exp), "--minutes", "0.3",
               "--eval-every", "0.1", "--num-threads", "1")
    assert "already trained" in again.stderr and "Training:" not in again.stderr
    assert sorted(exp.glob("checkpoint-*.pt")) == sorted(ckpts)

    # --avg 2: each checkpoint on the mean since the checkpoint two before
    lc("run", "--data-dir", str(tiny_corpus), "--exp-dir", str(exp), "--skip-train", "true", "--avg", "2",
       "--num-threads", "1")
    cache = (exp / "curve.json").read_text()
    third = states[2]["batch_idx_train"]
    assert f'"1..{second}"' in cache and f'"{first + 1}..{third}"' in cache
    with open(exp / "learning_curve_avg2.csv") as f:
        assert [int(r["batch"]) for r in csv.DictReader(f)] == [s["batch_idx_train"] for s in states]
    c2 = lc("compare", "--runs", f"avg2={exp}", "--avg", "2", "--out", str(tmp_path / "cmp2" / "t"))
    assert "| avg2 |" in c2.stdout

    # compare: one table row per run, the first run's name first
    out = tmp_path / "cmp" / "ablation"
    c = lc("compare", "--runs", f"base={exp},again={exp}", "--out", str(out))
    assert c.stdout.index("| base |") < c.stdout.index("| again |")
    assert out.with_suffix(".png").exists() and out.with_suffix(".md").exists()

