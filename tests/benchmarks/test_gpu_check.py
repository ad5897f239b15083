"""benchmarks/gpu_check.py in its CPU smoke mode (--device cpu --tiny), so that the GPU check
cannot rot between the rare runs on a GPU machine: every stage runs and reports its figures,
and nothing outside torch, numpy, onnx, onnxruntime, sentencepiece and their dependencies is
imported on its path."""

import importlib.metadata as md
import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import script_module

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu_check.py"
# what the GPU machine has (docs/gpu-check.md); tqdm: torch.hub imports it when it is there
ALLOWED_DISTRIBUTIONS = ("torch", "numpy", "onnx", "onnxruntime", "sentencepiece")
OPTIONAL_MODULES = {"tqdm"}


def gpu_check(tmp_path: Path, *extra: str, name: str = "out"):
    out = tmp_path / f"{name}.json"
    r = subprocess.run([sys.executable, str(SCRIPT), "--device", "cpu", "--tiny", "--out-json", str(out),
                        "--work-dir", str(tmp_path / f"work-{name}"), *extra],
                       cwd=ROOT, capture_output=True, text=True, timeout=900)
    return r, (json.loads(out.read_text()) if out.is_file() else None)


def dependency_modules(dists) -> set:
    """Top-level modules of ``dists`` and of everything they require (extras aside)."""
    def norm(n):
        return re.sub(r"[-_.]+", "-", n).lower()

    seen, todo = set(), list(dists)
    while todo:
        d = todo.pop()
        if norm(d) in seen:
            continue
        seen.add(norm(d))
        try:
            reqs = md.requires(d) or []
        except md.PackageNotFoundError:
            continue
        todo += [re.split(r"[ ;<>=!~\[(]", r, maxsplit=1)[0] for r in reqs if "extra ==" not in r]
    return {mod for mod, owners in md.packages_distributions().items() if any(norm(o) in seen for o in owners)}


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("gpu_check")
    r, res = gpu_check(tmp)
    assert r.returncode == 0 and res is not None, r.stdout[-3000:] + r.stderr[-3000:]
    return r, res


@pytest.mark.slow
def test_every_stage_runs_and_reports_its_figures(smoke):
    r, res = smoke
    assert res["ok"] and res["skipped"] == [] and res["elapsed_s"] <= res["time_budget_s"]
    assert res["environment"]["device"] == "cpu" and res["config"]["encoder"] == "tiny"
    rows = {(t["model_type"], t["dtype"]): t for t in res["train"]}
    assert set(rows) == {(m, d) for m in ("conditioned", "two-decoder") for d in ("fp32", "bf16")}
    for (model_type, dtype), t in rows.items():
        assert t["ok"] and t["loss_backend"] == "pruned" and t["parameters"] > 1e6
        assert t["autocast_dtype"] == ("bfloat16" if dtype == "bf16" else None)
        assert t["grad_scaler"] is False  # fp16 only, and only on CUDA
        assert t["steps"] == 2 and not t["stopped_by_budget"] and t["audio_seconds_per_second"] > 0
        st = t["step_time_s"]
        assert 0 < st["p50"] <= st["p90"] <= st["max"] and st["first"] > 0
        rep = t["repeated_batch"]
        assert rep["falls"] and rep["steps"] == 4 and all(math.isfinite(x) for x in rep["losses"])
        assert t["nonfinite_steps"] == 0 and t["weights_finite"]
        assert t["host_syncs"]["per_step"] > 0 and "aten::_local_scalar_dense" in t["host_syncs"]["method"]
        assert math.isfinite(t["loss_start"]) and math.isfinite(t["loss_end"])
    # both dtypes of a model type train on the same generated batches
    assert rows["conditioned", "fp32"]["repeated_batch"]["audio_seconds"] == \
        rows["conditioned", "bf16"]["repeated_batch"]["audio_seconds"]

    c = res["checkpoint"]
    assert c["ok"] and c["cuda_visible"] is False and c["encoder_rel_err_vs_device"] < 1e-4
    assert c["averaged_model_loads"] and c["model_type"] == "conditioned"
    assert [d["model_type"] for d in res["decode"]] == ["conditioned", "two-decoder"]
    for d in res["decode"]:
        assert d["ok"] and d["streaming_lengths_match"] and d["streaming_vs_masked_rel_err"] < 1e-4
        assert sorted((s["mode"], s["method"]) for s in d["searches"]) == [
            (m, s) for m in ("N", "P") for s in ("greedy_search", "modified_beam_search")]
    o = res["onnx"]
    assert o["ok"] and {"encoder", "decoder-N", "joiner-N", "decoder-P", "joiner-P"} <= set(o["files"])
    scan = res["oom_scan"]
    assert scan["ok"] and [x["fits"] for x in scan["tried"]] == [True, True]
    assert scan["largest_fitting_max_duration"] == 8.0
    assert [(d["backend"], d["world_size"]) for d in res["ddp"]] == [("gloo", 1), ("gloo", 2)]
    for d in res["ddp"]:
        assert d["ok"] and not d["timed_out"] and all(x["weights_equal_across_ranks"] for x in d["ranks"])
        assert all(x["statuses"] == {"stepped": 2} for x in d["ranks"])

    # the markdown table
    assert "| model | dtype | steps | s audio / s |" in r.stdout and ": OK in " in r.stdout
    assert "| conditioned | bf16 | 2 |" in r.stdout and "| ddp gloo x2 | ok |" in r.stdout
    assert_imports_only_what_the_gpu_machine_has(res)


def test_it_imports_only_what_the_gpu_machine_has(tmp_path):
    """Every stage, on one model type and dtype (the others import the same modules: the slow
    test above checks the imports of the whole smoke run too)."""
    r, res = gpu_check(tmp_path, "--model-types", "conditioned", "--dtypes", "fp32", name="imports")
    assert r.returncode == 0 and res is not None, r.stdout[-3000:] + r.stderr[-3000:]
    assert res["ok"] and res["skipped"] == [] and [d["model_type"] for d in res["decode"]] == ["conditioned"]
    assert_imports_only_what_the_gpu_machine_has(res)


def assert_imports_only_what_the_gpu_machine_has(res) -> None:
    allowed = dependency_modules(ALLOWED_DISTRIBUTIONS) | OPTIONAL_MODULES
    assert "torch" in allowed and "lhotse" not in allowed
    assert set(res["imports"]["third_party"]) <= allowed, set(res["imports"]["third_party"]) - allowed
    # the project never looked for a package the GPU machine lacks (torch probes some: pandas, sklearn)
    asked = {name.split(".")[0] for name in res["imports"]["refused"]}
    assert not asked & {"lhotse", "kaldialign", "soundfile", "torchaudio", "kaldi_native_fbank", "piper",
                        "kokoro_onnx", "espeakng_loader", "tensorboard", "sherpa_onnx"}, asked


def test_the_time_budget_stops_training_and_skips_the_stages_that_no_longer_fit(tmp_path):
    r, res = gpu_check(tmp_path, "--model-types", "conditioned", "--dtypes", "bf16", "--time-budget", "1",
                       "--steps", "50", name="budget")
    assert res is not None, r.stderr[-3000:]
    (t,) = res["train"]
    assert t["stopped_by_budget"] and t["steps"] == 1 and t["repeated_batch"]["steps"] == 2
    assert [s.split(":")[0] for s in res["skipped"]] == ["checkpoint", "decode", "onnx", "oom_scan", "ddp"]
    assert "| skipped | checkpoint: time budget" in r.stdout


def test_the_check_trains_with_train_pys_own_defaults():
    """The check builds its models from train.py's parser and TRAINING_DEFAULTS (paper: icefall's
    LibriSpeech settings), so what it measures is what a run of train.py would do."""
    gpu_check = script_module("benchmarks/gpu_check.py")
    from zipformer_pc.training.train import TRAINING_DEFAULTS

    args = gpu_check.training_args("paper", "two-decoder", "fp16", Path("x"))
    for k, v in TRAINING_DEFAULTS["paper"].items():
        assert getattr(args, k) == (v(args) if callable(v) else v), k
    assert args.dtype == "fp16" and args.use_fp16 is True and args.model_type == "two-decoder"
    # LibriSpeech-like durations: 2..17 s, mean about 12.6 s
    import numpy as np

    d = gpu_check.librispeech_durations(np.random.default_rng(0), 20000)
    assert 2.0 <= d.min() and d.max() <= 17.0 and 12.0 < d.mean() < 13.2
