"""egs/synth/run.sh: option checks, and the quick recipe end to end on the tiny corpus."""

import csv
import json
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import TRAINING_TIMEOUT

ROOT = Path(__file__).resolve().parents[2]
RECIPE = ["bash", "egs/synth/run.sh"]


def run(args, timeout=60):
    return subprocess.run(RECIPE + args, cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def test_help_lists_the_stages():
    r = run(["--help"])
    assert r.returncode == 0
    for word in ("--quick", "--systems", "Stages:", "RESULTS.md", "measure_rtf.py", "--latency-chunks",
                 "--load-streams", "server_load.py"):
        assert word in r.stdout


@pytest.mark.parametrize(
    "args, message",
    [
        (["--systems", "cond_p,nonsense"], "unknown system 'nonsense'"),
        (["--avg", "5"], "--avg must be 1, 2, 3 or 4"),
        (["--num-batches", "2"], "--num-batches must be a number >= 4"),
        (["--num-seeds", "0"], "--num-seeds must be a number >= 1"),
        (["--from-scratch", "true", "--freeze-encoder", "true"], "--freeze-encoder true needs a trained encoder"),
        (["--init-dir", "/nonexistent"], "/nonexistent/norm.pt is missing"),
        (["--quick", "maybe"], "--quick must be true or false"),
        (["--latency-chunks", "16,32"], "--latency-chunks must be chunk sizes separated by spaces"),
        (["--latency-utts", "all"], "--latency-utts must be a number"),
        (["--load-streams", "1 4"], "--load-streams must be a comma list"),
        (["--no-such-option", "1"], "unknown option --no-such-option"),
    ],
)
def test_bad_options_fail_before_any_work(tmp_path, args, message):
    r = run(args + ["--exp-dir", str(tmp_path / "exp"), "--data-dir", str(tmp_path / "data")])
    assert r.returncode == 2
    assert message in r.stderr
    assert not (tmp_path / "data").exists()


def own_corpus(tiny_corpus: Path, tmp_path: Path) -> Path:
    """A copy of the session's tiny corpus: the recipe adds the shipped tokenizer to it (stage 0)."""
    data = tmp_path / "data"
    shutil.copytree(tiny_corpus.parent, data)
    return data


@pytest.mark.slow
def test_quick_recipe_end_to_end_and_rerun_skips_finished_work(tiny_corpus, tmp_path):
    exp = tmp_path / "exp"
    systems = "punct_p,norm,cond_p,cond_p0.2,cond_rand0.2"
    args = ["--quick", "true", "--data-dir", str(own_corpus(tiny_corpus, tmp_path)), "--exp-dir", str(exp),
            "--systems", systems, "--num-seeds", "2"]
    r = run(args, timeout=TRAINING_TIMEOUT)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]

    # the plan the run followed (egs/systems.tsv) lists every system; the run trained the selected ones,
    # the proportion systems (cond_p among them) with two seeds
    with open(exp / "systems.tsv") as f:
        registry = {row["name"]: row for row in csv.DictReader((x for x in f if not x.startswith("#")), delimiter="\t")}
    assert len(registry) == 17
    runs = systems.split(",") + ["cond_p-seed43", "cond_p0.2-seed43", "cond_rand0.2-seed43"]
    for name in runs:
        assert (exp / name / "checkpoint-8.pt").is_file(), name
    assert not (exp / "twodec_p").exists() and not (exp / "norm-seed43").exists()
    # every system fine-tunes the shipped norm model with the shipped tokenizer, on the cached outputs
    # of its frozen encoder (computed once)
    cmd = (exp / "cond_p-seed43" / "train_cmd.txt").read_text()
    assert "--init-from egs/synth/pretrained/norm.pt" in cmd and "--freeze-encoder true" in cmd
    assert "--seed 43" in cmd and "lang_bpe_256/bpe.model" in cmd
    assert f"--encoder-cache {exp}/encoder_cache-norm.pt" in cmd
    assert r.stdout.count("Encoder outputs of the frozen") == 1
    # the P/N split of each Table III system reaches train.py
    cmd_rand = (exp / "cond_rand0.2" / "train_cmd.txt").read_text()
    cmd_fixed = (exp / "cond_p0.2" / "train_cmd.txt").read_text()
    assert "--punct-proportion 0.2" in cmd_rand and "synth_cuts_train_p1.jsonl.gz" in cmd_rand
    assert "synth_cuts_train_p0.2.jsonl.gz" in cmd_fixed and "--punct-proportion" not in cmd_fixed

    # decoding outputs per system, mode and test set; the cascade from the norm model
    dec = exp / "norm" / "greedy_search"
    assert list(dec.glob("recogs-test-N-*chunk-32-left-128.txt"))
    assert list(dec.glob("recogs-test_ood-P-*-cascade.txt"))
    assert list((exp / "cond_p" / "greedy_search").glob("recogs-test_ood-P-*.txt"))

    # ONNX exports (fp32 + int8) of the Table I systems and the RTF table
    assert list((exp / "cond_p" / "onnx").glob("encoder-*.int8.onnx"))
    rtf = (exp / "rtf.md").read_text()
    for name in ("punct_p", "cond_p", "cascade"):
        assert name in rtf
    # cond_p's caption latency per chunk size (fp32 exports at 16 and 64 beside the chunk-32 one) on 2
    # utterances, and the server with 1 and 2 concurrent streams (quick presets)
    for c in (16, 64):
        assert list((exp / "cond_p" / f"onnx_chunk{c}").glob(f"encoder-iter-8-avg-2-chunk-{c}-left-128.onnx"))
    latency = json.loads((exp / "latency.json").read_text())
    assert latency["num_utts"] == 2 and [x["system"] for x in latency["rows"]] == ["chunk-16", "chunk-32", "chunk-64"]
    assert [(x["system"], x["chunk_ms"], x["mode"]) for x in latency["latency_rows"]] == [
        (f"chunk-{c}", 20.0 * c, m) for c in (16, 32, 64) for m in ("N", "P")]
    assert all(x["words"] > 0 and x["delays_p50_ms"] > 0 for x in latency["latency_rows"])
    load = json.loads((exp / "load.json").read_text())
    assert [(x["streams"], x["identical"]) for x in load["rows"]] == [(1, 1), (2, 2)] and load["seconds"] == 3

    # RESULTS.md (quick: under the exp dir) with the tables, plots and missing systems
    md = (exp / "RESULTS.md").read_text()
    for heading in ("## Table I", "## Table II", "## Table III", "## Alpha", "## Streaming with the exported ONNX"):
        assert heading in md
    # the latency and load tables, each with the command that measured it
    section = md[md.index("## Caption latency and stability per chunk size"):md.index("## Server load")]
    assert "--latency true" in section and f"--output-md {exp}/latency.md" in section and "on 2 utterances" in section
    for x in latency["latency_rows"]:
        assert f"| {x['system']} | {x['chunk_ms']:.0f} | {x['mode']} | {x['words']} |" in section
    section = md[md.index("## Server load"):].split("\n## ")[0]
    assert f"benchmarks/server_load.py --model-dir {exp}/cond_p/onnx --streams 1,2 --seconds 3" in section
    rows = [line for line in section.splitlines() if line.startswith(("| 1 |", "| 2 |"))]
    assert [line.rsplit("|", 2)[1].strip() for line in rows] == ["1/1", "2/2"]
    assert "Not measured" not in md
    table1 = md[md.index("## Table I"):md.index("## Table II")]
    cond_row = next(line for line in table1.splitlines() if line.startswith("| conditioned |"))
    cells = [c.strip() for c in cond_row.strip("|").split("|")]
    assert cells[1] == "P+N" and cells[2].endswith("M")
    float(cells[3])  # the ONNX RTF
    # WER of cond_p, mean ± std over its two seeds: fine-tuned from the shipped model, it transcribes
    mean, pm, std = cells[4].rstrip("*").split()
    assert pm == "±" and float(mean) < 40 and float(std) >= 0
    assert "twodec_p on test" in md.split("## Missing outputs")[1]
    # the header says how the systems were trained and which weights were decoded
    assert "fine-tuned from egs/synth/pretrained/norm.pt (encoder frozen" in md
    assert "`iter-8-avg-2` (cond_p: mean of the weights after each of batches 5..8)" in md
    # seeds: mean +- std on the Table III rows
    assert " ± " in next(line for line in md[md.index("## Table III"):].splitlines() if line.startswith("| cond_p0.2 |"))
    assert (exp / "figures" / "proportion.png").is_file()
    assert not (ROOT / "egs" / "synth" / "RESULTS.md").read_text().startswith("# Results: quick run") \
        if (ROOT / "egs" / "synth" / "RESULTS.md").exists() else True
    stages = [line.split("\t")[0] for line in (exp / "timing.tsv").read_text().splitlines()]
    assert stages == ["0", "1", "2", "3", "4", "5", "6"]
    # the final lines say how to stream a wav through the exported model
    assert "-m zipformer_pc.transcribe --model-dir" in r.stdout

    # a second run redoes nothing expensive
    r2 = run(args + ["--stop-stage", "5"], timeout=900)
    assert r2.returncode == 0, r2.stderr[-3000:]
    for name in runs:
        assert f"{name}: already trained" in r2.stdout
        assert f"{name}: already decoded" in r2.stdout
    assert "norm_cascade: already decoded" in r2.stdout
    assert "cond_p: already exported" in r2.stdout
    assert "cond_p at chunk 16: already exported" in r2.stdout and "cond_p at chunk 64: already exported" in r2.stdout
    assert "start training" not in r2.stdout and "start decoding" not in r2.stdout


@pytest.mark.slow
def test_interrupted_training_resumes_from_its_newest_checkpoint(tiny_corpus, tmp_path):
    """A system trained for 4 batches continues from checkpoint-4.pt when the budget grows to 8."""
    exp = tmp_path / "exp"
    args = ["--quick", "true", "--data-dir", str(own_corpus(tiny_corpus, tmp_path)), "--exp-dir", str(exp),
            "--systems", "norm", "--stage", "0", "--stop-stage", "1"]
    r = run(args + ["--num-batches", "4"], timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    r = run(args + ["--num-batches", "8"], timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "training of norm (4..8 batches)" in r.stdout
    assert "--start-batch 4" in (exp / "norm" / "train_cmd.txt").read_text()
    assert (exp / "norm" / "checkpoint-8.pt").is_file()


@pytest.mark.slow
def test_a_call_killed_in_a_stage_is_booked_by_the_next(tiny_corpus, tmp_path):
    """A session's end kills the recipe in stage 1: the next call books the dead call's time
    (up to its last write) and the wall time sums both calls."""
    import os
    import signal
    import time

    exp = tmp_path / "exp"
    args = ["--quick", "true", "--data-dir", str(own_corpus(tiny_corpus, tmp_path)), "--exp-dir", str(exp),
            "--systems", "norm", "--stage", "0", "--stop-stage", "1", "--num-batches", "40"]
    p = subprocess.Popen(RECIPE + args, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         start_new_session=True)
    log = exp / "norm" / "train.log"
    deadline = time.time() + 600
    while time.time() < deadline and not (log.is_file() and "batch 20:" in log.read_text()):
        time.sleep(0.5)
    time.sleep(2)
    os.killpg(p.pid, signal.SIGKILL)  # the whole process group, as a session's end does
    p.wait()
    rows = [line.split("\t") for line in (exp / "timing.tsv").read_text().splitlines()]
    assert rows[-1][:4] == ["1", "0", "training: Table I systems", "running"], rows
    r = run(args, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "Stage 1 of an earlier call was interrupted" in r.stdout + r.stderr
    rows = [line.split("\t") for line in (exp / "timing.tsv").read_text().splitlines()]
    dead = [x for x in rows if x[0] == "1" and x[3:] == ["interrupted"]]
    assert len(dead) == 1 and int(dead[0][1]) >= 2, rows
    assert [x[0] for x in rows if len(x) == 3] == ["0", "0", "1"]  # the finished stages of both calls
    assert (exp / "norm" / "checkpoint-40.pt").is_file()
