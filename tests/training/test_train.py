"""train.py end to end on the tiny synthetic corpus: every model type, resume, DDP, learning."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


def train_cmd(corpus: Path, exp_dir: Path, *extra: str, subset: str = "p0.5"):
    return [
        sys.executable, "-m", "zipformer_pc.training.train",
        "--exp-dir", str(exp_dir),
        "--train-cuts", str(corpus / "fbank" / f"synth_cuts_train_{subset}.jsonl.gz"),
        "--valid-cuts", str(corpus / "fbank" / "synth_cuts_dev.jsonl.gz"),
        "--bpe-model", str(corpus / "lang_bpe_120" / "bpe.model"),
        "--max-duration", "40", "--log-interval", "1", "--valid-interval", "1000",
        "--average-period", "1", "--tensorboard", "false", "--num-threads", "1",
        *extra,
    ]


def run(cmd, timeout=600):
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, r.stderr[-4000:]
    return r


@pytest.mark.parametrize("model_type", ["punct", "norm", "two-decoder", "conditioned"])
def test_each_model_type_trains_a_few_steps(tiny_corpus, tmp_path, model_type):
    r = run(train_cmd(tiny_corpus, tmp_path, "--model-type", model_type, "--num-epochs", "1",
                      "--max-batches", "2", "--save-every-n", "2"))
    # the tiny encoder's CPU defaults fill what the command leaves out, and say so
    assert "Defaults of --encoder tiny used for: " in r.stderr and "--loss pruned" in r.stderr
    assert "Transducer loss: pruned (pruned RNN-T in plain PyTorch" in r.stderr  # no k2 here: logged
    assert f"({model_type}, encoder tiny: 1,1,1,1,1,1 layers per stack)" in r.stderr
    ck = torch.load(tmp_path / "checkpoint-2.pt", weights_only=False)
    assert ck["model_config"]["head"]["model_type"] == model_type
    assert ck["batch_idx_train"] == 2
    assert (tmp_path / "model_config.json").exists()
    assert list((tmp_path / "log").glob("log-train-*"))


@pytest.mark.slow
def test_resume_mid_epoch_reproduces_an_uninterrupted_run(tiny_corpus, tmp_path):
    common = ("--num-epochs", "2", "--save-every-n", "3")
    # a run started without the loss warm-up (as fine-tuning does) keeps it off when resumed
    # without the option: the warm-up counts batches from the start of training
    run(train_cmd(tiny_corpus, tmp_path / "a", *common, "--warm-step", "0", "--max-batches", "9"))
    run(train_cmd(tiny_corpus, tmp_path / "b", *common, "--warm-step", "0", "--max-batches", "3"))
    r = run(train_cmd(tiny_corpus, tmp_path / "b", *common, "--start-batch", "3", "--max-batches", "9"))
    assert "Resuming with the checkpoint's --warm-step 0" in r.stderr
    from zipformer_pc.training.checkpoint import load_checkpoint

    a, b = (load_checkpoint(tmp_path / x / "checkpoint-9.pt") for x in ("a", "b"))
    for k in a["model"]:
        assert torch.equal(a["model"][k], b["model"][k]), k
        assert torch.equal(a["model_avg"][k], b["model_avg"][k]), k


@pytest.mark.slow
def test_sortagrad_epoch_resumes_mid_epoch_and_then_shuffles(tiny_corpus, tmp_path):
    common = ("--num-epochs", "2", "--save-every-n", "2", "--sortagrad-epochs", "1", "--warm-step", "0")
    a = run(train_cmd(tiny_corpus, tmp_path / "a", *common))
    ends = a.stderr.count("SortaGrad's 1 shortest-first epoch(s) are over")
    assert ends == 1, a.stderr[-3000:]  # logged once, when epoch 2 starts
    last = torch.load(tmp_path / "a" / "epoch-2.pt", weights_only=False)["batch_idx_train"]
    # interrupted inside the sorted first epoch and resumed: the same weights at the end
    run(train_cmd(tiny_corpus, tmp_path / "b", *common, "--max-batches", "2"))
    r = run(train_cmd(tiny_corpus, tmp_path / "b", *common, "--start-batch", "2"))
    assert "SortaGrad's 1 shortest-first epoch(s) are over" in r.stderr
    b = torch.load(tmp_path / "b" / "epoch-2.pt", weights_only=False)
    assert b["batch_idx_train"] == last
    ref = torch.load(tmp_path / "a" / "epoch-2.pt", weights_only=False)
    for k in ref["model"]:
        assert torch.equal(ref["model"][k], b["model"][k]), k


@pytest.mark.slow
def test_a_minutes_budget_cools_the_learning_rate_down_to_zero(tiny_corpus, tmp_path):
    r = run(train_cmd(tiny_corpus, tmp_path, "--num-epochs", "100", "--max-minutes", "0.2",
                      "--lr-cooldown-minutes", "0.15", "--save-every-minutes", "0.04", "--warm-step", "0"))
    assert "cool-down: linear towards 0 over the last 0.15 of 0.2 minutes of training" in r.stderr
    from zipformer_pc.training.optim import Eden, make_optimizer
    fractions = []
    for path in sorted(tmp_path.glob("checkpoint-*.pt"), key=lambda p: int(p.stem.split("-")[1])):
        ck = torch.load(path, weights_only=False)
        minutes = ck["train_seconds"] / 60
        # each checkpoint holds the rate of the next update: Eden's, times what is left of the cool-down
        fraction = min(1.0, max(0.0, (0.2 - minutes) / 0.15))
        assert ck["scheduler"]["cooldown_fraction"] == pytest.approx(fraction), path
        plain = Eden(make_optimizer("scaled_adam", [torch.nn.Parameter(torch.ones(1))]))
        plain.load_state_dict(dict(ck["scheduler"]))
        plain.set_cooldown_fraction(1.0)
        assert ck["optimizer"]["param_groups"][0]["lr"] == pytest.approx(fraction * plain.get_last_lr()[0])
        fractions.append(fraction)
    assert fractions[-1] == 0.0 and any(0 < f < 1 for f in fractions), fractions


@pytest.mark.slow
def test_plateau_cuts_the_learning_rate_and_a_resumed_run_keeps_counting(tiny_corpus, tmp_path):
    # threshold 0.99: no validation after the first counts as an improvement, so with
    # patience 1 every later validation (batches 4, 6; then 8 after resuming) cuts by half
    common = ("--num-epochs", "3", "--save-every-n", "2", "--valid-interval", "2", "--warm-step", "0",
              "--lr-plateau-factor", "0.5", "--lr-plateau-patience", "1", "--lr-plateau-threshold", "0.99")
    r = run(train_cmd(tiny_corpus, tmp_path, *common, "--max-batches", "6"))
    assert r.stderr.count("learning rate x0.5") == 2, r.stderr[-3000:]
    ck = torch.load(tmp_path / "checkpoint-6.pt", weights_only=False)
    assert ck["scheduler"]["scale"] == 0.25 and ck["plateau_waits"] == 0
    assert ck["plateau_best"] < float("inf")
    # resumed: the first cut continues from the checkpoint's scale (an epoch end may validate too);
    # this call also cools the learning rate down over its last 2 batches: batch 8 updates at half of it
    r = run(train_cmd(tiny_corpus, tmp_path, *common, "--start-batch", "6", "--max-batches", "8",
                      "--lr-cooldown-batches", "2"))
    assert "(scale 0.125," in r.stderr, r.stderr[-3000:]
    assert "cool-down: linear towards 0 over batches 7..8" in r.stderr, r.stderr[-3000:]
    ck8 = torch.load(tmp_path / "checkpoint-8.pt", weights_only=False)
    assert ck8["scheduler"]["scale"] == 0.25 * 0.5 ** r.stderr.count("learning rate x0.5")
    from zipformer_pc.training.optim import Eden, make_optimizer
    plain = Eden(make_optimizer("scaled_adam", [torch.nn.Parameter(torch.ones(1))]))
    plain.load_state_dict(dict(ck8["scheduler"]))
    plain.set_cooldown(0, 0)
    assert ck8["optimizer"]["param_groups"][0]["lr"] == pytest.approx(0.5 * plain.get_last_lr()[0])
    assert ck8["plateau_best"] == ck["plateau_best"]
    # the model card's training story reads the cuts from these logs
    import importlib.util
    spec = importlib.util.spec_from_file_location("_pub", ROOT / "egs/synth/publish_pretrained.py")
    pub = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(pub)
    cuts = [x for x in pub.training_story(tmp_path, {}) if "validation plateau" in x]
    assert [c.split(":")[0] for c in cuts][:2] == ["  at batch 4", "  at batch 6"] and len(cuts) >= 3, cuts
    assert all(": learning rate x0.5 on a validation plateau (to " in c for c in cuts), cuts


@pytest.mark.slow
def test_killed_run_resumes_from_its_last_checkpoint(tiny_corpus, tmp_path):
    cmd = train_cmd(tiny_corpus, tmp_path, "--num-epochs", "3", "--save-every-n", "1")
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    while time.time() < deadline and not (tmp_path / "checkpoint-3.pt").exists():
        time.sleep(0.2)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    done = sorted(int(p.stem.split("-")[1]) for p in tmp_path.glob("checkpoint-*.pt"))
    assert done and done[-1] >= 3
    last = done[-1]
    # checkpoints are written atomically: the newest one loads even after a kill
    run(train_cmd(tiny_corpus, tmp_path, "--num-epochs", "3", "--save-every-n", "1",
                  "--start-batch", str(last), "--max-batches", str(last + 2)))
    ck = torch.load(tmp_path / f"checkpoint-{last + 2}.pt", weights_only=False)
    assert ck["batch_idx_train"] == last + 2


@pytest.mark.slow
def test_two_process_gloo_ddp(tiny_corpus, tmp_path):
    run(train_cmd(tiny_corpus, tmp_path, "--world-size", "2", "--master-port", "29517",
                      "--num-epochs", "1", "--max-batches", "2", "--save-every-n", "2"), timeout=900)
    logs = sorted((tmp_path / "log").glob("log-train-*"))
    assert {p.name[-1] for p in logs} == {"0", "1"}, "each rank writes its log"
    assert (tmp_path / "checkpoint-2.pt").exists()


@pytest.mark.parametrize("model_type", ["conditioned", "two-decoder"])
def test_tiny_validation_loss_falls_and_checkpoints_average(tiny_corpus, tmp_path, model_type):
    run(train_cmd(tiny_corpus, tmp_path, "--model-type", model_type, "--num-epochs", "3",
                  "--save-every-n", "1000", "--base-lr", "0.045"), timeout=900)
    losses = []
    for e in (1, 3):
        log = "".join(p.read_text() for p in (tmp_path / "log").glob("log-train-*"))
        line = [ln for ln in log.splitlines() if f"Epoch {e} done" in ln][-1]
        vn = float(line.split("'valid_loss_n': ")[1].split(",")[0])
        vp = float(line.split("'valid_loss_p': ")[1].split(",")[0])
        losses.append((vn, vp))
    assert losses[1][0] < losses[0][0] and losses[1][1] < losses[0][1], losses

    # --epoch 3 --avg 2: plain average of epochs 2 and 3, or (default) the
    # running averages' difference between the end of epoch 1 and of epoch 3
    from zipformer_pc.training.checkpoint import averaged_weights, load_checkpoint, load_model_for_inference

    e1, e2, e3 = (load_checkpoint(tmp_path / f"epoch-{e}.pt") for e in (1, 2, 3))
    plain = averaged_weights(tmp_path, 3, 2, use_averaged_model=False)["model"]
    key = next(k for k, v in plain.items() if v.is_floating_point() and v.numel() > 100)
    torch.testing.assert_close(plain[key], (e2["model"][key] + e3["model"][key]) / 2)
    running = averaged_weights(tmp_path, 3, 2)["model"]
    n1, n3 = e1["model_avg_batches"], e3["model_avg_batches"]
    assert (n1, n3) == (e1["batch_idx_train"], e3["batch_idx_train"])
    expected = (e3["model_avg"][key] * n3 - e1["model_avg"][key] * n1) / (n3 - n1)
    torch.testing.assert_close(running[key], expected, rtol=1e-4, atol=1e-5)
    model = load_model_for_inference(tmp_path, 3, 2)
    assert model.desc == "epoch-3-avg-2" and not model.training and model.model_type == model_type


def test_init_from_a_norm_checkpoint_with_auxiliary_ctc(tiny_corpus, tmp_path):
    run(train_cmd(tiny_corpus, tmp_path / "seed", "--model-type", "norm", "--num-epochs", "1",
                  "--max-batches", "2", "--save-every-n", "2"))
    seed = tmp_path / "seed" / "checkpoint-2.pt"
    r = run(train_cmd(tiny_corpus, tmp_path / "ft", "--model-type", "conditioned", "--num-epochs", "1",
                      "--max-batches", "2", "--save-every-n", "2", "--init-from", str(seed),
                      "--init-modules", "encoder,decoders", "--ctc-loss-scale", "0.2"))
    assert f"from {seed} (--init-modules encoder,decoders)" in r.stderr
    assert ", CTC " in r.stderr
    ft = torch.load(tmp_path / "ft" / "checkpoint-2.pt", weights_only=False)
    assert any(k.startswith("ctc_output.") for k in ft["model"])
    bad = subprocess.run(train_cmd(tiny_corpus, tmp_path / "bad", "--init-from", str(tmp_path / "nope.pt"),
                                   "--max-batches", "1"), cwd=ROOT, capture_output=True, text=True)
    assert bad.returncode != 0 and "--init-from:" in bad.stderr


def test_auto_punct_training_validates_on_true_p_when_dev_has_no_p_auto(tiny_corpus, tmp_path):
    from lhotse import CutSet, load_manifest_lazy

    from zipformer_pc.data.references import AUTO_PUNCT_KEY, P_KEY, any_auto_punct

    cuts = []
    for c in load_manifest_lazy(tiny_corpus / "fbank" / "synth_cuts_train_p1.jsonl.gz"):
        for s in c.supervisions:
            s.custom[AUTO_PUNCT_KEY] = s.custom[P_KEY].rstrip(".?") + "."  # a P' that differs from P
        cuts.append(c)
    train = tmp_path / "train_pauto.jsonl.gz"
    CutSet.from_cuts(cuts).to_file(train)
    dev = tiny_corpus / "fbank" / "synth_cuts_dev.jsonl.gz"
    assert any_auto_punct(load_manifest_lazy(train)) and not any_auto_punct(load_manifest_lazy(dev))
    cmd = train_cmd(tiny_corpus, tmp_path / "exp", "--model-type", "punct", "--use-auto-punct", "true",
                    "--max-batches", "1", "--valid-interval", "1")
    cmd[cmd.index("--train-cuts") + 1] = str(train)
    r = run(cmd)
    assert "carry no P' reference: mode P is validated on their true P" in r.stderr
    line = next(x for x in r.stderr.splitlines() if "Validation at batch 1" in x)
    assert "'valid_num_p': 0.0" not in line and "'valid_loss_p': nan" not in line


@pytest.mark.slow
def test_short_epochs_average_exactly_the_per_batch_weights(tiny_corpus, tmp_path):
    """Epochs (~6 batches) and the whole run far shorter than --average-period 200.

    Every batch's weights are saved (``--save-every-n 1``), so the brute-force
    mean over an interval can be compared with what decoding loads.  Before
    the running average was made exact, this run decoded the random initial
    weights (the average was never updated) and extrapolated intervals.
    Tolerance: 1e-6 absolute (float64 sums of float32 weights).
    """
    from zipformer_pc.training.checkpoint import averaged_weights, batch_checkpoints, load_checkpoint

    # a narrower encoder (1.2M parameters instead of 5.3M): averaging does not depend on the width,
    # and the ~20 checkpoints, each with float64 running means, take 0.3 GB instead of 1.5
    narrow = [a for f in ("encoder-dim", "encoder-unmasked-dim") for a in (f"--{f}", ",".join(["64"] * 6))]
    narrow += ["--feedforward-dim", ",".join(["128"] * 6), "--num-heads", ",".join(["2"] * 6)]
    cmd = train_cmd(tiny_corpus, tmp_path, "--model-type", "conditioned", "--num-epochs", "3",
                    "--save-every-n", "1", "--keep-last-k", "0", "--average-period", "200",
                    "--warmup-batches", "2", *narrow)
    run(cmd, timeout=900)
    per_batch = {int(p.stem.split("-")[1]): load_checkpoint(p)["model"] for p in batch_checkpoints(tmp_path)}
    ends = [load_checkpoint(tmp_path / f"epoch-{e}.pt")["batch_idx_train"] for e in (1, 2, 3)]
    assert ends[2] < 200 and sorted(per_batch) == list(range(1, ends[2] + 1)), (ends, sorted(per_batch))

    def brute(first: int, last: int):
        return {k: sum(per_batch[b][k].double() for b in range(first, last + 1)) / (last - first + 1)
                for k, v in per_batch[last].items() if v.is_floating_point()}

    init = load_checkpoint(tmp_path / "checkpoint-1.pt")  # for "it moved from batch 1"
    for epoch, avg, first in ((3, 1, ends[1] + 1), (3, 2, ends[0] + 1), (2, 5, 1)):
        w = averaged_weights(tmp_path, epoch=epoch, avg=avg)
        assert w["batches"] == (first, ends[epoch - 1])
        want = brute(first, ends[epoch - 1])
        for k, v in want.items():
            torch.testing.assert_close(w["model"][k].double(), v, rtol=0, atol=1e-6, msg=k)
    w = averaged_weights(tmp_path, iteration=ends[2], avg=4)
    for k, v in brute(ends[2] - 3, ends[2]).items():
        torch.testing.assert_close(w["model"][k].double(), v, rtol=0, atol=1e-6, msg=k)
    # the decoded weights are trained ones, not the initial copy
    key = "joiners.main.output_linear.weight"
    assert not torch.allclose(averaged_weights(tmp_path, epoch=3, avg=1)["model"][key].float(),
                              init["model"][key], atol=1e-4)
    # decode logs the batch range it averages
    d = subprocess.run([sys.executable, "-m", "zipformer_pc.decoding.decode", "--exp-dir", str(tmp_path), "--epoch", "3",
                        "--avg", "1", "--bpe-model", str(tiny_corpus / "lang_bpe_120" / "bpe.model"),
                        "--test-sets", f"dev={tiny_corpus / 'fbank' / 'synth_cuts_dev.jsonl.gz'}",
                        "--num-threads", "1"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert d.returncode == 0, d.stderr[-3000:]
    assert f"batches {ends[1] + 1}..{ends[2]}" in d.stderr
