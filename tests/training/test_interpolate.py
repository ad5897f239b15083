"""zipformer_pc.training.interpolate: a fine-tuned run mixed with its start (WiSE-FT), read back by the
averaging that decoding and export use."""

from argparse import Namespace
from pathlib import Path

import pytest
import torch

from zipformer_pc.training.checkpoint import averaged_weights, load_checkpoint, save_checkpoint
from zipformer_pc.training.interpolate import interpolate, main, mix

CONFIG = {"encoder": {"tiny": True}, "head": {"vocab_size": 7}}


def _weights(seed: int):
    g = torch.Generator().manual_seed(seed)
    return {"a.weight": torch.randn(3, 4, generator=g), "b.bias": torch.randn(5, generator=g),
            "steps": torch.tensor(seed)}


def _run(exp: Path) -> dict:
    """A fine-tuning run with checkpoints after batches 10 and 20 (running means of the weights)."""
    means = {10: _weights(1), 20: _weights(2)}
    for b, mean in means.items():
        save_checkpoint(exp / f"checkpoint-{b}.pt", {
            "model": _weights(100 + b), "model_avg": mean, "model_avg_batches": b, "optimizer_steps": b,
            "batch_idx_train": b, "train_seconds": 6.0 * b, "audio_seconds": 60.0 * b, "model_config": CONFIG,
            "args": {"keep_last_k": 5, "base_lr": 0.0015}, "optimizer": {"state": "not copied"}})
    (exp / "log").mkdir()
    (exp / "log" / "log-train-x").write_text("Initialised 3 tensors from start.pt\n")
    # the exact mean of the weights after batches 11..20
    return {k: (means[20][k].double() * 20 - means[10][k].double() * 10) / 10 for k in ("a.weight", "b.bias")}


def test_interpolate_mixes_floating_tensors_and_keeps_the_others():
    run, start = _weights(1), _weights(2)
    mix = interpolate(run, start, 0.25)
    assert torch.allclose(mix["a.weight"], 0.25 * run["a.weight"] + 0.75 * start["a.weight"])
    assert mix["a.weight"].dtype == torch.float32
    assert int(mix["steps"]) == 1  # not a weight: the run's
    assert torch.equal(interpolate(run, start, 1.0)["b.bias"], run["b.bias"])
    assert torch.equal(interpolate(run, start, 0.0)["b.bias"], start["b.bias"])
    with pytest.raises(ValueError, match="another architecture"):
        interpolate(run, {**start, "b.bias": torch.zeros(6)}, 0.5)
    with pytest.raises(ValueError, match="another architecture"):
        interpolate(run, {k: v for k, v in start.items() if k != "b.bias"}, 0.5)
    with pytest.raises(ValueError, match=r"within \[0, 1\]"):
        interpolate(run, start, 1.5)


def test_the_mix_is_read_back_as_iter_b_avg_1_and_described(tmp_path):
    exp, out = tmp_path / "run", tmp_path / "wise"
    exact = _run(exp)
    start = {k: v.half() if v.is_floating_point() else v for k, v in _weights(3).items()}  # a shipped fp16 .pt
    torch.save({"model": start, "averaged": "mean of the weights after each of batches 5..9"}, tmp_path / "start.pt")
    main(["--exp-dir", str(exp), "--iter", "20", "--avg", "1", "--start", str(tmp_path / "start.pt"),
          "--weight", "0.25", "--out-dir", str(out)])

    w = averaged_weights(out, iteration=20, avg=1)
    for k in exact:
        want = 0.25 * exact[k] + 0.75 * start[k].double()
        assert torch.allclose(w["model"][k].double(), want, atol=1e-6), k
    assert w["desc"] == "iter-20-avg-1" and w["batches"] == (11, 20)
    assert "0.25 x the run's iter-20-avg-1 (mean of the weights after each of batches 11..20)" in w["how"]
    assert "0.75 x the weights it started from" in w["how"] and "batches 5..9" in w["how"]
    assert w["model_config"] == CONFIG
    # final weights instead of running means: the same single checkpoint, still described as the mix
    assert torch.equal(averaged_weights(out, iteration=20, avg=1, use_averaged_model=False)["model"]["a.weight"],
                       w["model"]["a.weight"])
    ck = load_checkpoint(out / "checkpoint-20.pt")
    assert ck["train_seconds"] == 120.0 and ck["batch_idx_train"] == 20 and "optimizer" not in ck
    assert ck["args"]["base_lr"] == 0.0015 and ck["interpolated"]["command"].endswith(f"--out-dir {out}")
    assert (out / "log" / "log-train-x").read_text().startswith("Initialised")
    with pytest.raises(FileNotFoundError, match="needs 3"):
        averaged_weights(out, iteration=20, avg=2)

    # training cannot resume from it
    from zipformer_pc.training.train import load_resume_checkpoint
    with pytest.raises(SystemExit, match="no optimizer state"):
        load_resume_checkpoint(out, Namespace(start_batch=20, start_epoch=1))

    # written again (another batch of the run): the earlier mix is replaced
    main(["--exp-dir", str(exp), "--iter", "10", "--start", str(tmp_path / "start.pt"), "--weight", "1",
          "--out-dir", str(out)])
    assert sorted(p.name for p in out.glob("checkpoint-*.pt")) == ["checkpoint-10.pt"]
    w1 = averaged_weights(out, iteration=10, avg=1)
    assert torch.allclose(w1["model"]["a.weight"], _weights(1)["a.weight"])
    # weight 1: the start is not part of the mix, and its history is not written into it
    assert w1["how"].startswith("1 x the run's iter-10-avg-1") and "started from" not in w1["how"], w1["how"]


def test_bad_requests_are_refused_and_nothing_is_lost(tmp_path):
    exp = tmp_path / "run"
    _run(exp)
    torch.save({"model": _weights(3)}, tmp_path / "start.pt")
    base = ["--exp-dir", str(exp), "--iter", "20", "--start", str(tmp_path / "start.pt"), "--weight", "0.5"]
    with pytest.raises(SystemExit, match="must not be the run's"):
        main(base + ["--out-dir", str(exp)])
    other = tmp_path / "other"
    _run(other)  # a training run's directory
    with pytest.raises(SystemExit, match="holds checkpoints of a training run"):
        main(base + ["--out-dir", str(other)])
    assert sorted(p.name for p in other.glob("checkpoint-*.pt")) == ["checkpoint-10.pt", "checkpoint-20.pt"]
    torch.save({"model": {**_weights(3), "b.bias": torch.zeros(6)}}, tmp_path / "wide.pt")
    with pytest.raises(SystemExit, match="another architecture"):
        main(base[:4] + ["--start", str(tmp_path / "wide.pt"), "--weight", "0.5", "--out-dir", str(tmp_path / "w")])
    with pytest.raises(SystemExit, match="not found"):
        main(base[:2] + ["--iter", "15", *base[4:], "--out-dir", str(tmp_path / "w")])
    assert sorted(p.name for p in exp.glob("checkpoint-*.pt")) == ["checkpoint-10.pt", "checkpoint-20.pt"]


def test_runs_from_one_start_mix_as_a_soup(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    exact_a = _run(a)
    _run(b)  # read at batch 10 with other weights than run a's: its running mean there is the mean of 1..10
    ck = load_checkpoint(b / "checkpoint-10.pt")
    ck["model_avg"] = _weights(7)
    save_checkpoint(b / "checkpoint-10.pt", ck)
    start = _weights(3)
    torch.save({"model": start}, tmp_path / "start.pt")
    out = tmp_path / "soup"
    main(["--exp-dir", str(a), str(b), "--iter", "20", "10", "--start", str(tmp_path / "start.pt"),
          "--weight", "0.4", "0.2", "--out-dir", str(out)])
    w = averaged_weights(out, iteration=20, avg=1)
    for k in exact_a:
        want = 0.4 * exact_a[k] + 0.2 * _weights(7)[k].double() + 0.4 * start[k].double()
        assert torch.allclose(w["model"][k].double(), want, atol=1e-6), k
    assert f"0.2 x {b}'s iter-10-avg-1 (mean of the weights after each of batches 1..10)" in w["how"]
    assert "0.4 x the weights it started from" in w["how"]
    ck = load_checkpoint(out / "checkpoint-20.pt")  # the first run's counters
    assert ck["batch_idx_train"] == 20 and ck["interpolated"]["runs"] == [str(a), str(b)]
    # one run mixed by mix() is interpolate()
    run, other = _weights(1), _weights(2)
    assert torch.equal(mix([run], [0.3], other)["a.weight"], interpolate(run, other, 0.3)["a.weight"])

    with pytest.raises(SystemExit, match="one --iter and one --weight per --exp-dir"):
        main(["--exp-dir", str(a), str(b), "--iter", "20", "--start", str(tmp_path / "start.pt"),
              "--weight", "0.4", "0.2", "--out-dir", str(tmp_path / "x")])
    with pytest.raises(SystemExit, match="sum to at most 1"):
        main(["--exp-dir", str(a), str(b), "--iter", "20", "10", "--start", str(tmp_path / "start.pt"),
              "--weight", "0.6", "0.5", "--out-dir", str(tmp_path / "x")])
    with pytest.raises(ValueError, match="run 2's weights are of another architecture"):
        mix([run, {**other, "b.bias": torch.zeros(6)}], [0.5, 0.5], other)
    assert not (tmp_path / "x").exists()
