"""train.py option defaults per encoder (fast)."""

import math
import os

import pytest

from zipformer_pc.training.train import TRAINING_DEFAULTS, apply_training_defaults, get_parser

BASE = ["--train-cuts", "t.jsonl.gz", "--valid-cuts", "v.jsonl.gz", "--bpe-model", "b.model", "--exp-dir", "x"]


def parse(*extra):
    args = get_parser().parse_args(BASE + list(extra))
    args.defaults_filled = apply_training_defaults(args)  # as train.py's main does
    return args, args.defaults_filled


def test_each_encoder_gets_its_own_defaults_and_the_command_line_wins():
    tiny, filled = parse("--encoder", "tiny", "--base-lr", "0.02")
    assert tiny.base_lr == 0.02 and "base_lr" not in filled  # given: kept
    for k, v in TRAINING_DEFAULTS["tiny"].items():
        if k != "base_lr":
            v = v(tiny) if callable(v) else v
            assert getattr(tiny, k) == v and filled[k] == v, k
    paper, _ = parse("--encoder", "paper")
    # icefall's LibriSpeech settings for the paper-size model
    assert (paper.loss, paper.spec_augment, paper.warmup_batches, paper.lr_epochs, paper.ctc_loss_scale) == \
        ("auto", True, 500.0, 3.5, 0.0)
    # the two tables differ where the CPU measurements say so
    assert TRAINING_DEFAULTS["tiny"]["loss"] == "pruned" and TRAINING_DEFAULTS["tiny"]["spec_augment"] is False
    # a false boolean given on the command line is not mistaken for "unset"
    on, _ = parse("--encoder", "tiny", "--spec-augment", "true")
    off, _ = parse("--encoder", "paper", "--spec-augment", "false")
    assert on.spec_augment is True and off.spec_augment is False
    assert set(TRAINING_DEFAULTS["tiny"]) == set(TRAINING_DEFAULTS["paper"])


def scheduler_from(args):
    """The optimizer and Eden schedule train.py builds from ``args``, on one parameter."""
    import torch

    from zipformer_pc.training.optim import Eden, make_optimizer

    opt = make_optimizer("scaled_adam", [torch.nn.Parameter(torch.ones(3))], lr=args.base_lr)
    return Eden(opt, args.lr_batches, args.lr_epochs, warmup_batches=args.warmup_batches)


def test_a_resumed_run_takes_the_schedule_given_on_its_command_line_only():
    from zipformer_pc.training.train import resume_schedule

    first, _ = parse("--encoder", "tiny", "--lr-batches", "7500")
    saved = scheduler_from(first)
    saved.step_batch(2000)
    state = saved.state_dict()
    lr_saved = saved.get_last_lr()[0]

    # nothing given: the checkpoint's schedule holds
    args, _ = parse("--encoder", "tiny")
    s = scheduler_from(args)
    s.load_state_dict(dict(state))
    assert resume_schedule(s, args) == [] and s.get_last_lr()[0] == lr_saved

    # --lr-batches given: the learning rate decays from here on, the batch count is kept
    args, _ = parse("--encoder", "tiny", "--lr-batches", "1000", "--base-lr", "0.03")
    s = scheduler_from(args)
    s.load_state_dict(dict(state))
    changes = resume_schedule(s, args)
    assert changes == ["--base-lr 0.045 -> 0.03", "--lr-batches 7500 -> 1000"]
    assert s.batch == 2000 and s.lr_batches == 1000
    expected = 0.03 * (1 + 2.0 ** 2) ** -0.25 * (1 + (s.epoch / s.lr_epochs) ** 2) ** -0.25
    assert abs(s.get_last_lr()[0] - expected) < 1e-12 and s.get_last_lr()[0] < lr_saved
    assert s.optimizer.param_groups[0]["base_lr"] == 0.03


def test_sortagrad_is_a_tiny_default_for_training_from_scratch_only():
    scratch, filled = parse("--encoder", "tiny")
    assert scratch.sortagrad_epochs == 1 and filled["sortagrad_epochs"] == 1
    # fine-tuning reads its data shuffled from the first batch
    finetune, filled = parse("--encoder", "tiny", "--init-from", "norm.pt")
    assert finetune.sortagrad_epochs == 0 and filled["sortagrad_epochs"] == 0
    given, filled = parse("--encoder", "tiny", "--init-from", "norm.pt", "--sortagrad-epochs", "2")
    assert given.sortagrad_epochs == 2 and "sortagrad_epochs" not in filled
    paper, _ = parse("--encoder", "paper")
    assert paper.sortagrad_epochs == 0


def test_a_resumed_run_keeps_its_checkpoints_counters_unless_given():
    from zipformer_pc.training.train import keep_checkpoint_counters

    # a run started before SortaGrad was a default (no such option in its checkpoint) resumes shuffled,
    # and a fine-tuning run started with --warm-step 0 does not warm up again
    args, filled = parse("--encoder", "tiny")
    args.defaults_filled = filled
    changes = keep_checkpoint_counters(args, {"warm_step": 0, "lr_epochs": 3.5})
    assert (args.sortagrad_epochs, args.warm_step, args.lr_epochs) == (0, 0, 100.0)
    assert changes == ["--warm-step 0 (the default is 2000)", "--sortagrad-epochs 0 (the default is 1)"]
    # values given on the command line win over the checkpoint's
    args, filled = parse("--encoder", "tiny", "--sortagrad-epochs", "3", "--warm-step", "10")
    args.defaults_filled = filled
    assert keep_checkpoint_counters(args, {"warm_step": 0, "sortagrad_epochs": 1}) == []
    assert (args.sortagrad_epochs, args.warm_step) == (3, 10)
    # the checkpoint agrees with the defaults, or has no options saved: nothing changes
    args, filled = parse("--encoder", "tiny")
    args.defaults_filled = filled
    assert keep_checkpoint_counters(args, {"warm_step": 2000, "sortagrad_epochs": 1}) == []
    assert keep_checkpoint_counters(args, {}) == [] and args.sortagrad_epochs == 1
    # a run that read only the shortest half in its sorted epoch goes on doing so
    assert keep_checkpoint_counters(args, {"warm_step": 2000, "sortagrad_epochs": 1, "sortagrad_fraction": 0.5}) \
        == ["--sortagrad-fraction 0.5 (the default is 1.0)"] and args.sortagrad_fraction == 0.5


def test_the_plateau_rule_cuts_where_the_validation_loss_stalls():
    from zipformer_pc.training.train import plateau_cut

    c = {"plateau_best": float("inf"), "plateau_waits": 0}
    # validation L_N of the shipped conditioned model's run at a fixed LR (batches 168..1630):
    # 46.81 at the 4th validation is the best; three validations then fail to beat it by 1 %
    losses = [48.94, 49.43, 49.97, 46.81, 48.13, 48.34, 47.20, 47.49, 45.31]
    cuts = [plateau_cut(c, x, patience=3, threshold=0.01) for x in losses]
    assert cuts == [False, False, False, False, False, False, True, False, False]
    assert c["plateau_best"] == 45.31 and c["plateau_waits"] == 0
    # an improvement under the threshold is no improvement; NaN (nothing validated) is ignored
    c = {"plateau_best": 100.0, "plateau_waits": 0}
    assert [plateau_cut(c, x, 2, 0.01) for x in (99.5, float("nan"), 99.4)] == [False, False, True]
    assert c["plateau_best"] == 100.0


def test_the_validation_loss_followed_is_n_plus_p_over_the_modes_validated():
    from zipformer_pc.training.train import total_valid_loss

    nan = float("nan")
    assert total_valid_loss({"valid_loss_n": 30.5, "valid_loss_p": 36.5}) == 67.0
    assert total_valid_loss({"valid_loss_n": 30.5, "valid_loss_p": nan}) == 30.5  # a set with N only
    assert math.isnan(total_valid_loss({"valid_loss_n": nan, "valid_loss_p": nan}))


def test_a_plateau_cut_survives_resumption_and_composes_with_a_new_base_lr():
    from zipformer_pc.training.train import resume_schedule

    first, _ = parse("--encoder", "tiny", "--base-lr", "0.03")
    s = scheduler_from(first)
    s.step_batch(1000)
    before = s.get_last_lr()[0]
    s.cut(0.4)
    assert s.get_last_lr()[0] == pytest.approx(0.4 * before)
    state = s.state_dict()
    # resumed with the same options: the cut holds
    r = scheduler_from(first)
    r.load_state_dict(dict(state))
    assert resume_schedule(r, first) == [] and r.get_last_lr()[0] == pytest.approx(0.4 * before)
    # resumed with a lower --base-lr: both apply
    args, _ = parse("--encoder", "tiny", "--base-lr", "0.015")
    r = scheduler_from(args)
    r.load_state_dict(dict(state))
    resume_schedule(r, args)
    assert r.get_last_lr()[0] == pytest.approx(0.2 * before)
    # a checkpoint written before the scale existed resumes unscaled
    old = {k: v for k, v in state.items() if k != "scale"}
    r = scheduler_from(first)
    r.load_state_dict(old)
    assert r.scale == 1.0 and r.get_last_lr()[0] == pytest.approx(before)


def test_bad_training_options_are_refused():
    import subprocess
    import sys

    for bad in (["--lr-plateau-factor", "0"], ["--lr-plateau-factor", "1.5"], ["--lr-plateau-patience", "0"],
                ["--sortagrad-fraction", "0"], ["--sortagrad-fraction", "1.5"], ["--freq-warp", "0.5"],
                ["--freq-warp", "-0.1"], ["--freq-warp", "0.1", "--encoder-cache", "c"],
                ["--use-fp16", "true", "--dtype", "bf16"]):
        r = subprocess.run([sys.executable, "-m", "zipformer_pc.training.train", *BASE, *bad],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode != 0 and bad[0] in r.stderr, (bad, r.stderr[-300:])


def test_the_cooldown_ends_a_run_of_known_length_at_a_learning_rate_near_zero():
    args, _ = parse("--encoder", "tiny", "--max-batches", "400", "--lr-cooldown-batches", "100")
    s = scheduler_from(args)
    eden = scheduler_from(args)  # the same schedule without the cool-down
    s.set_cooldown(args.lr_cooldown_batches, args.max_batches + 1)  # as train.py calls it
    lrs, refs = {}, {}
    for b in range(1, 401):
        s.step_batch(b)
        eden.step_batch(b)
        lrs[b], refs[b] = s.get_last_lr()[0], eden.get_last_lr()[0]
    assert all(lrs[b] == refs[b] for b in range(1, 302))
    ratios = [lrs[b] / refs[b] for b in range(301, 401)]
    assert ratios[-1] == pytest.approx(1 / 100) and ratios[50] == pytest.approx(50 / 100)
    assert all(x > y for x, y in zip(ratios[1:], ratios[2:])), "a linear fall, batch by batch"
    # it is not carried over by a checkpoint: each call sets its own (or none)
    r = scheduler_from(args)
    r.load_state_dict(dict(s.state_dict()))
    r.set_cooldown(0, 0)
    assert r.get_last_lr()[0] == pytest.approx(refs[400])
    with pytest.raises(ValueError):
        r.set_cooldown(10, 5)


def test_the_minutes_cooldown_falls_linearly_over_the_last_minutes_of_the_budget():
    from types import SimpleNamespace

    from zipformer_pc.training.train import Trainer

    args, _ = parse("--encoder", "tiny", "--max-minutes", "60", "--lr-cooldown-minutes", "20")
    s, eden = scheduler_from(args), scheduler_from(args)
    tr = SimpleNamespace(args=args, scheduler=s)
    s.step_batch(700)
    eden.step_batch(700)
    ratio = {}
    for minutes in (0, 30, 40, 45, 50, 59.5, 60, 61):
        Trainer.time_cooldown(tr, minutes)
        ratio[minutes] = s.get_last_lr()[0] / eden.get_last_lr()[0]
    assert ratio[0] == ratio[30] == ratio[40] == 1.0
    assert ratio[45] == pytest.approx(0.75) and ratio[50] == pytest.approx(0.5) and ratio[59.5] == pytest.approx(0.025)
    assert ratio[60] == ratio[61] == 0.0
    # the next batch keeps the fraction (step_batch multiplies Eden's factor by it)
    Trainer.time_cooldown(tr, 50)
    s.step_batch(701)
    eden.step_batch(701)
    assert s.get_last_lr()[0] == pytest.approx(0.5 * eden.get_last_lr()[0])
    # set by each call: resumed without the option (or from a run that had it), no cool-down
    r = scheduler_from(args)
    r.load_state_dict(dict(s.state_dict()))
    args0, _ = parse("--encoder", "tiny", "--max-minutes", "60", "--lr-cooldown-minutes", "0")
    Trainer.time_cooldown(SimpleNamespace(args=args0, scheduler=r), 50)
    assert r.get_last_lr()[0] == pytest.approx(eden.get_last_lr()[0])
    with pytest.raises(ValueError):
        r.set_cooldown_fraction(1.5)


def test_a_tiny_run_with_a_time_budget_cools_down_over_its_last_third_by_default():
    # measured: docs/cpu-training.md (the learning curve's `cool20` and `def_cool` runs)
    tiny, filled = parse("--encoder", "tiny", "--max-minutes", "60")
    assert tiny.lr_cooldown_minutes == 20.0 and filled["lr_cooldown_minutes"] == 20.0
    assert parse("--encoder", "tiny", "--max-minutes", "90")[0].lr_cooldown_minutes == 30.0
    # no budget, a cool-down by batches instead, or given on the command line: no default one
    assert parse("--encoder", "tiny")[0].lr_cooldown_minutes == 0.0
    by_batches, _ = parse("--encoder", "tiny", "--max-minutes", "60", "--max-batches", "900",
                          "--lr-cooldown-batches", "300")
    assert by_batches.lr_cooldown_minutes == 0.0 and by_batches.lr_cooldown_batches == 300
    given, filled = parse("--encoder", "tiny", "--max-minutes", "60", "--lr-cooldown-minutes", "5")
    assert given.lr_cooldown_minutes == 5.0 and "lr_cooldown_minutes" not in filled
    off, _ = parse("--encoder", "tiny", "--max-minutes", "60", "--lr-cooldown-minutes", "0")
    assert off.lr_cooldown_minutes == 0.0
    # the paper encoder keeps icefall's schedule
    assert parse("--encoder", "paper", "--max-minutes", "60")[0].lr_cooldown_minutes == 0.0


def test_cooldown_needs_max_batches():
    import subprocess
    import sys

    for bad in (["--lr-cooldown-batches", "100"], ["--lr-cooldown-batches", "100", "--max-batches", "50"],
                ["--lr-cooldown-batches", "-1"]):
        r = subprocess.run([sys.executable, "-m", "zipformer_pc.training.train", *BASE, *bad],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode != 0 and "--lr-cooldown-batches" in r.stderr, (bad, r.stderr[-300:])
    for bad in (["--lr-cooldown-minutes", "10"], ["--lr-cooldown-minutes", "10", "--max-minutes", "5"],
                ["--lr-cooldown-minutes", "5", "--max-minutes", "5", "--lr-cooldown-batches", "10",
                 "--max-batches", "20"]):
        r = subprocess.run([sys.executable, "-m", "zipformer_pc.training.train", *BASE, *bad],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode != 0 and "--lr-cooldown-minutes" in r.stderr, (bad, r.stderr[-300:])


def test_a_second_training_on_the_same_exp_dir_refuses_to_start(tmp_path):
    """Two runs on one --exp-dir would write the same checkpoint names: the second stops at once,
    naming the process that holds the directory; the lock goes with the process that held it."""
    import subprocess
    import sys

    from zipformer_pc.training.train import lock_exp_dir

    exp = tmp_path / "exp"
    held = lock_exp_dir(exp)
    cmd = [sys.executable, "-m", "zipformer_pc.training.train", "--train-cuts", "t.jsonl.gz", "--valid-cuts",
           "v.jsonl.gz", "--bpe-model", "b.model", "--exp-dir", str(exp)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert r.returncode == 1
    assert f"Another training is running on {exp} (process {os.getpid()})" in r.stderr
    with pytest.raises(SystemExit, match="Another training is running"):
        lock_exp_dir(exp)  # another open file of this process: refused as well
    held.close()
    again = lock_exp_dir(exp)  # free once its holder let go
    assert (exp / ".train.lock").read_text() == f"{os.getpid()}\n"
    again.close()


def test_context_size_with_init_from_keeps_the_init_models_or_widens_it(tmp_path):
    import torch

    from zipformer_pc.model.transducer import HeadConfig, make_model_config
    from zipformer_pc.training.train import model_config_for_init, model_config_from_args

    cfg = make_model_config("tiny", {}, HeadConfig(model_type="conditioned", vocab_size=64, context_size=2))
    torch.save({"model": {}, "model_config": cfg}, tmp_path / "init.pt")
    init = ["--init-from", str(tmp_path / "init.pt")]

    def context(*extra):
        args, _ = parse(*init, *extra)
        return model_config_for_init(args, 64, True)["head"]["context_size"]

    copied = ["--init-modules", "encoder,decoders,joiners"]
    assert context(*copied) == 2  # not given: the init model's
    assert context(*copied, "--context-size", "16") == 16  # widened (init_from_checkpoint pads the taps)
    with pytest.raises(SystemExit, match="can only be widened"):
        context(*copied, "--context-size", "1")
    assert context("--context-size", "1") == 1  # a fresh predictor (--init-modules encoder) may have any
    args, _ = parse()
    assert args.context_size is None and model_config_from_args(args, 64, True)["head"]["context_size"] == 2
    args, _ = parse("--context-size", "0")
    with pytest.raises(ValueError, match="--context-size must be >= 1"):  # not silently 2
        model_config_from_args(args, 64, True)


def test_the_sentence_end_loss_builds_its_output_and_a_fine_tune_adds_it(tmp_path):
    import torch

    from zipformer_pc.model.transducer import HeadConfig, build_model, make_model_config
    from zipformer_pc.training.checkpoint import INIT_MODULES, init_from_checkpoint
    from zipformer_pc.training.train import init_modules, model_config_for_init, model_config_from_args

    args, _ = parse()
    assert args.sentence_end_loss_scale == 0 and not model_config_from_args(args, 64, True)["head"]["sentence_end"]
    args, _ = parse("--sentence-end-loss-scale", "10")
    assert model_config_from_args(args, 64, True)["head"]["sentence_end"]
    # from a model trained without it: the output is added, fresh; everything else is copied
    torch.manual_seed(0)
    src = build_model(make_model_config("tiny", {}, HeadConfig(model_type="conditioned", vocab_size=64)))
    torch.save({"model": src.state_dict(), "model_config": make_model_config(
        "tiny", {}, HeadConfig(model_type="conditioned", vocab_size=64))}, tmp_path / "init.pt")
    args, _ = parse("--init-from", str(tmp_path / "init.pt"), "--sentence-end-loss-scale", "10",
                    "--init-modules", "encoder, decoders,joiners,sentence_end_output")
    assert init_modules(args) == ["encoder", "decoders", "joiners", "sentence_end_output"]
    every = init_modules(parse("--init-modules", "all")[0])
    assert every == list(INIT_MODULES) and "sentence_end_output" in every and "ctc_output" in every
    model = build_model(model_config_for_init(args, 64, False))
    got = init_from_checkpoint(model, tmp_path / "init.pt", init_modules(args))
    assert sorted(got["kept"]) == ["sentence_end_output.bias", "sentence_end_output.weight"]
    torch.testing.assert_close(model.joiners["main"].output_linear.weight, src.joiners["main"].output_linear.weight)


def test_front_end_channels_reach_the_model_config_and_a_bad_combination_is_refused():
    from zipformer_pc.training.train import get_model, model_config_from_args

    args, _ = parse()
    assert args.encoder == "tiny" and model_config_from_args(args, 64, True)["encoder"]["front_end_channels"] == 64
    args, _ = parse("--encoder", "paper")
    assert model_config_from_args(args, 64, True)["encoder"]["front_end_channels"] == 128
    args, _ = parse("--front-end-channels", "96")
    model, config = get_model(args, None, 64, True)
    assert config["encoder"]["front_end_channels"] == 96
    assert model.encoder.encoder_embed.out.in_features == 96 * 19
    args, _ = parse("--encoder", "paper", "--front-end-channels", "64")  # the paper front end has a ConvNeXt block
    with pytest.raises(SystemExit, match="Model options: a front end of 64 channels with a ConvNeXt block"):
        get_model(args, None, 64, True)


def test_validation_totals_are_reduced_on_the_training_device(monkeypatch):
    """With several ranks the validation totals are all-reduced on the process
    group; NCCL reduces CUDA tensors only, so the tensor must live on the
    training device (``meta`` here stands for CUDA), not on the CPU."""
    import torch

    from zipformer_pc.training import train as train_mod

    seen = []

    class Reduced(Exception):
        pass

    def fake_all_reduce(t, *a, **kw):
        seen.append(t.device)
        raise Reduced

    monkeypatch.setattr(train_mod.dist, "is_available", lambda: True)
    monkeypatch.setattr(train_mod.dist, "is_initialized", lambda: True)
    monkeypatch.setattr(train_mod.dist, "all_reduce", fake_all_reduce)
    with pytest.raises(Reduced):
        train_mod.compute_validation_loss(torch.nn.Linear(2, 2), [], None, None, torch.device("meta"))
    assert seen == [torch.device("meta")]


def test_loss_auto_is_the_pruned_loss_without_k2():
    """auto never falls back to the full (B, T, U, V) lattice: the plain-PyTorch
    pruned loss when k2 is missing (the paper preset's default)."""
    from zipformer_pc.model import loss as loss_mod

    assert loss_mod.resolve_backend("auto") == "pruned"
    assert loss_mod.resolve_backend("full") == "full"


def test_dtype_and_its_older_name_use_fp16():
    from zipformer_pc.training.train import resolve_dtype

    for extra, dtype in ((), "fp32"), (("--use-fp16", "true"), "fp16"), (("--use-fp16", "false"), "fp32"), \
            (("--dtype", "bf16"), "bf16"), (("--dtype", "bf16", "--use-fp16", "false"), "bf16"), \
            (("--dtype", "fp16", "--use-fp16", "true"), "fp16"):
        args, _ = parse(*extra)
        assert resolve_dtype(args) == dtype and args.dtype == dtype, extra
        assert args.use_fp16 is (dtype == "fp16") and resolve_dtype(args) == dtype  # settled: the same again
    for extra in (("--dtype", "bf16", "--use-fp16", "true"), ("--dtype", "fp16", "--use-fp16", "false")):
        args, _ = parse(*extra)
        with pytest.raises(ValueError, match="contradicts --dtype"):
            resolve_dtype(args)


def test_autocast_and_the_grad_scaler_per_dtype_and_device(monkeypatch):
    """fp16 autocasts on CUDA only and is the only precision with a loss scaler; bf16
    autocasts on CUDA and on a CPU; fp32 never."""
    import torch

    from zipformer_pc.training import train as train_mod

    cpu, cuda = torch.device("cpu"), torch.device("cuda", 0)
    assert [train_mod.autocast_dtype(d, cuda) for d in ("fp32", "fp16", "bf16")] == [None, torch.float16,
                                                                                      torch.bfloat16]
    assert [train_mod.autocast_dtype(d, cpu) for d in ("fp32", "fp16", "bf16")] == [None, None, torch.bfloat16]
    made = []

    class Scaler:
        def __init__(self, device, init_scale, enabled):
            assert init_scale == 1.0  # --initial-grad-scale's default, icefall's
            made.append((device, enabled))

    monkeypatch.setattr(torch.amp, "GradScaler", Scaler)  # a real one disables itself without CUDA
    for d in ("fp32", "fp16", "bf16"):
        train_mod.make_grad_scaler(d, cuda)
        train_mod.make_grad_scaler(d, cpu)
    assert made == [("cuda", False), ("cuda", False), ("cuda", True), ("cuda", False), ("cuda", False),
                    ("cuda", False)]


def test_a_few_bf16_steps_on_the_cpu_lower_the_loss_of_a_repeated_batch(tmp_path):
    """--dtype bf16 on a CPU: the tiny model's forward runs under bfloat16 autocast (the encoder
    output is bfloat16), the losses stay float32 and finite, no scaler, and training steps on one
    repeated batch lower its loss."""
    import torch

    from zipformer_pc.model.loss import LossConfig
    from zipformer_pc.training.optim import Eden, make_optimizer
    from zipformer_pc.training.train import Trainer, get_model, make_grad_scaler, resolve_dtype

    args, _ = parse("--encoder", "tiny", "--dtype", "bf16", "--model-type", "conditioned")
    resolve_dtype(args)
    torch.manual_seed(0)
    model, config = get_model(args, None, 100, True)
    cpu = torch.device("cpu")
    optimizer = make_optimizer("scaled_adam", list(model.parameters()), lr=args.base_lr)
    scaler = make_grad_scaler(args.dtype, cpu)
    assert not scaler.is_enabled()
    tr = Trainer(args=args, rank=0, world_size=1, device=cpu, exp_dir=tmp_path, model=model, ddp_model=model,
                 model_config=config, model_avg=None, optimizer=optimizer,
                 scheduler=Eden(optimizer, args.lr_batches, args.lr_epochs, warmup_batches=args.warmup_batches),
                 scaler=scaler, loss_cfg=LossConfig(backend="pruned", warm_step=args.warm_step),
                 train_dl=None, valid_dl=None)
    g = torch.Generator().manual_seed(1)
    lens = torch.tensor([160, 120])
    tokens = [torch.randint(1, 100, (n,), generator=g).tolist() for n in (6, 4)]
    batch = {"features": torch.randn(2, 160, 80, generator=g), "feature_lens": lens, "tokens_n": tokens,
             "tokens_p": [tokens[0], None], "texts_p": ["A b.", None], "cut_ids": ["a", "b"], "durations": [1.6, 1.2]}
    encoder_dtypes = []
    model.encoder.register_forward_hook(lambda m, i, o: encoder_dtypes.append(o[0].dtype))
    model.train()
    losses = []
    for b in range(1, 6):
        out, status = tr.train_batch(batch, b)
        assert status == "stepped" and out["loss"].dtype == torch.float32
        losses.append(out["loss"].item())
    assert encoder_dtypes == [torch.bfloat16] * 5
    assert all(math.isfinite(x) for x in losses) and losses[-1] < losses[0], losses
    assert tr.counters["optimizer_steps"] == 5 and tr.counters["skipped_nonfinite"] == 0
