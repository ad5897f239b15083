"""benchmarks/loss_speed.py and benchmarks/sampler_speed.py at toy sizes: they run, print their
tables and write every figure (the measured tables are in docs/gpu-check.md)."""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run(args, tmp_path):
    out = tmp_path / "rows.json"
    r = subprocess.run([sys.executable, *args, "--out-json", str(out)], cwd=ROOT, capture_output=True, text=True,
                       timeout=600, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout, json.loads(out.read_text())


def test_loss_speed_compares_the_lattice_dtypes(tmp_path):
    out, rows = run(["benchmarks/loss_speed.py", "--shapes", "2x30x6x12", "--dim", "16", "--rounds", "1",
                     "--threads", "1"], tmp_path)
    assert [r["lattice_dtype"] for r in rows] == ["float64", "float32"]
    assert "| zipformer_pc.model.pruned_rnnt | 2x30x6x12 | float32 |" in out
    for r in rows:
        assert r["seconds"] > 0 and 0 <= r["lattice_seconds"] <= r["seconds"] and r["peak_memory_gb"] >= 0
    assert abs(rows[0]["pruned_loss"] - rows[1]["pruned_loss"]) < 1e-3 * rows[0]["pruned_loss"]


def test_sampler_speed_runs_an_epoch_per_configuration(tmp_path):
    out, rows = run(["benchmarks/sampler_speed.py", "--cuts", "400", "--manifest", str(tmp_path / "m.jsonl.gz"),
                     "--configs", "2:500,4:1000", "--max-duration", "100", "--scan"], tmp_path)
    assert [(r["num_buckets"], r["buffer_size"]) for r in rows] == [(2, 500), (4, 1000)]
    for r in rows:
        assert r["cuts"] == 400 and r["batches"] > 0 and r["padding"] >= 0 and r["oom_scan_pass_s"] >= 0
    assert "| 4 | 1000 |" in out
