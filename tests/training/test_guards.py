"""The guards of a long GPU run (zipformer_pc.training.guards and their wiring in train.py),
tested on a CPU with fakes: the fp16 loss-scale rules, the inf check, the OOM scan's choice of
batches and its report, torch.cuda.set_device before the process group, the sampler options."""

import math
from pathlib import Path

import pytest
import torch

from zipformer_pc.training.guards import (BatchShape, GradScaleCollapsed, GradScaleGuard, InfCheck, OomScanFailed,
                                          pessimistic_batches, scan_for_oom, suggest_max_duration)

ROOT_DIR = Path(__file__).resolve().parents[2]


class FakeScaler:
    """What the Trainer and the guard use of torch.amp.GradScaler, on a CPU (the loss is not
    scaled); ``value`` is the scale; counts the device reads."""

    def __init__(self, value, enabled=True):
        self.value, self.enabled, self.reads = value, enabled, 0

    def is_enabled(self):
        return self.enabled

    def get_scale(self):
        self.reads += 1
        return self.value

    def update(self, new_scale=None):
        if new_scale is not None:
            self.value = new_scale

    def scale(self, loss):
        return loss

    def step(self, optimizer):
        optimizer.step()

    def state_dict(self):
        return {"scale": self.value}


def test_a_small_scale_is_regrown_as_icefall_does():
    s = FakeScaler(1.0)
    g = GradScaleGuard(s)
    for b in range(1, 1001):
        g.check(b)
    # below 8: doubled at every 100th batch (1 -> 2 -> 4 -> 8 at 100, 200, 300); below 32 at every 400th
    # (8 -> 16 at 400, 16 -> 32 at 800), never above
    assert s.value == 32.0 and g.grown == 5
    assert s.reads == 10  # read on the 100th batches only
    big = FakeScaler(4096.0)
    GradScaleGuard(big).check(400)
    assert big.value == 4096.0


def test_a_disabled_scaler_is_never_read():
    s = FakeScaler(1e-9, enabled=False)
    GradScaleGuard(s).check(100)
    assert s.reads == 0


def test_a_collapsing_scale_saves_a_bad_model_and_stops_with_a_message():
    saved = []
    s = FakeScaler(0.005)
    g = GradScaleGuard(s, save=lambda suffix: saved.append(suffix) or f"bad-model{suffix}.pt")
    g.check(100)  # below 0.01: a warning and the first-warning checkpoint, once
    g.check(200)
    assert saved == ["-first-warning"]
    s.value = 1e-6
    with pytest.raises(GradScaleCollapsed, match=r"Batch 300: the fp16 loss scale collapsed to 1e-06.*"
                                                 r"saved in bad-model\.pt.*--inf-check true.*--dtype bf16"):
        g.check(300)
    assert saved == ["-first-warning", ""]


def test_the_trainer_saves_bad_model_checkpoints_and_ends_the_run(tmp_path):
    """Trainer.train_batch with a (fake, CPU) fp16 scaler whose scale has collapsed: the guard made
    by the Trainer writes bad-model-B.pt, a checkpoint that loads, and raises."""
    from zipformer_pc.model.loss import LossConfig
    from zipformer_pc.training.checkpoint import load_checkpoint
    from zipformer_pc.training.optim import Eden, make_optimizer
    from zipformer_pc.training.train import Trainer, get_model
    from test_train_args import parse

    args, _ = parse("--encoder", "tiny", "--model-type", "norm", "--ctc-loss-scale", "0")
    torch.manual_seed(0)
    model, config = get_model(args, None, 50, True)
    opt = make_optimizer("scaled_adam", list(model.parameters()), lr=args.base_lr)
    scaler = FakeScaler(1e-7)
    tr = Trainer(args=args, rank=0, world_size=1, device=torch.device("cpu"), exp_dir=tmp_path, model=model,
                 ddp_model=model, model_config=config, model_avg=None, optimizer=opt,
                 scheduler=Eden(opt, args.lr_batches, args.lr_epochs, warmup_batches=args.warmup_batches),
                 scaler=scaler, loss_cfg=LossConfig(backend="pruned"), train_dl=None, valid_dl=None)
    assert isinstance(tr.scale_guard, GradScaleGuard) and tr.scale_guard.floor == 1e-5
    batch = {"features": torch.randn(1, 100, 80), "feature_lens": torch.tensor([100]), "tokens_n": [[3, 4, 5]],
             "tokens_p": [None], "texts_p": [None], "cut_ids": ["a"], "durations": [1.0]}
    tr.counters["batch_idx_train"] = 99
    tr.train_batch(batch, 99)  # not a checking batch
    tr.counters["batch_idx_train"] = 100
    with pytest.raises(GradScaleCollapsed):
        tr.train_batch(batch, 100)
    ck = load_checkpoint(tmp_path / "bad-model-100.pt")
    assert ck["batch_idx_train"] == 100 and "model" in ck


def test_the_inf_check_names_the_first_module_that_goes_non_finite():
    class Log(torch.nn.Module):
        def forward(self, x):
            return torch.log(x)  # -inf at 0

    class Sqrt(torch.nn.Module):
        def forward(self, x):
            return torch.sqrt(x)  # an infinite gradient at 0

    model = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.ReLU(), Log(), torch.nn.Linear(3, 1))
    with torch.no_grad():
        model[0].weight.copy_(-torch.eye(3))
        model[0].bias.zero_()
    check = InfCheck().register(model)
    check.new_batch(7)
    model(torch.ones(2, 3))
    assert len(check.reports) == 1  # once per batch, the innermost module first
    assert check.reports[0].startswith("Batch 7: the output of 2 (Log) is not finite")
    assert "non-finite" in check.reports[0]

    model2 = torch.nn.Sequential(torch.nn.Linear(2, 2), Sqrt())
    with torch.no_grad():
        model2[0].weight.zero_()
        model2[0].bias.zero_()
    check2 = InfCheck().register(model2)
    check2.new_batch(3)
    model2(torch.ones(1, 2)).sum().backward()
    assert check2.reports == [] or not check2.reports[0].startswith("Batch 3: the output")
    assert any(r.startswith("Batch 3: the gradient of the output of 0 (Linear) is not finite") for r in check2.reports)
    check2.remove()
    assert check2.handles == []


# ------------------------------------------------------------------ OOM scan

def toy_cuts(n=300, seed=0):
    """Cuts without audio: durations and one supervision each, as a LibriSpeech manifest has."""
    import random

    from lhotse import CutSet, MonoCut, SupervisionSegment

    rng = random.Random(seed)
    cuts = []
    for i in range(n):
        d = round(rng.uniform(1.0, 20.0), 2)
        words = " ".join(["w"] * rng.randint(1, 60))
        cuts.append(MonoCut(id=f"c{i}", start=0.0, duration=d, channel=0, supervisions=[
            SupervisionSegment(id=f"c{i}", recording_id=f"r{i}", start=0.0, duration=d, text=words)]))
    return CutSet.from_cuts(cuts)


def words(cut):
    return len(cut.supervisions[0].text.split())


@pytest.mark.filterwarnings("ignore:You are using DynamicBucketingSampler with an eagerly read CutSet")
def test_the_pessimistic_batches_are_the_epochs_largest_and_the_sampler_is_untouched():
    from lhotse.dataset import DynamicBucketingSampler

    sampler = DynamicBucketingSampler(toy_cuts(), max_duration=60, num_buckets=4, shuffle=True, seed=3)
    sampler.set_epoch(2)
    worst = pessimistic_batches(sampler, words)
    batches = [list(b) for b in sampler]  # the sampler itself still yields its whole epoch 2
    assert sum(len(b) for b in batches) == 300

    def size(b, k):
        n, longest, tokens = len(b), max(c.duration for c in b), max(words(c) for c in b)
        return {"padded_seconds": n * longest, "padded_tokens": n * tokens, "lattice": n * longest * tokens}[k]

    for k in ("padded_seconds", "padded_tokens", "lattice"):
        assert math.isclose(getattr(worst[k], k), max(size(b, k) for b in batches))
        assert [c.id for c in worst[k].cuts] == [c.id for c in batches[worst[k].batch_index]]


def shape(i, n, longest, tokens):
    return BatchShape(count=n, seconds=n * longest * 0.9, longest=longest, max_tokens=tokens, batch_index=i)


def test_the_scan_reports_the_batch_that_runs_out_of_memory_and_a_smaller_max_duration():
    worst = {"padded_seconds": shape(4, 50, 20.0, 80), "lattice": shape(4, 50, 20.0, 80),
             "padded_tokens": shape(9, 120, 8.0, 100)}
    ran = []

    def step(s):
        ran.append(s.batch_index)
        if s.batch_index == 9:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    with pytest.raises(OomScanFailed) as e:
        scan_for_oom(worst, step, 1000, peak_memory=lambda: 60 * 2**30, reset_peak=lambda: None,
                     total_memory=80 * 2**30)
    assert ran == [4, 9]  # a batch that is the worst by two criteria runs once
    msg = str(e.value)
    assert "largest batch by padded_tokens (batch 9 of the epoch: 120 cuts" in msg
    # 60 GB for 1000 padded s: 0.06 GB/s; the failed batch has 960 padded s -> 0.85 * 80 / (0.06 * 960) = 1.18,
    # capped at 0.9 of 1000
    assert "at --max-duration 1000: try --max-duration 900" in msg

    rows = scan_for_oom({"padded_seconds": worst["padded_seconds"]}, lambda s: None, 1000,
                        peak_memory=lambda: 2**30, reset_peak=lambda: None, total_memory=0)
    assert rows[0]["criterion"] == "padded_seconds" and rows[0]["peak_memory_gb"] == 1.0

    def broken(s):
        raise ValueError("not a memory error")

    with pytest.raises(ValueError):
        scan_for_oom(worst, broken, 1000, lambda: 0, lambda: None, 0)


def test_the_suggested_max_duration():
    failed = shape(1, 100, 20.0, 50)  # 2000 padded s
    # 40 GB for 1000 padded s and 80 GB in all: 0.85 * 80 / (0.04 * 2000) = 0.85 -> 850
    assert suggest_max_duration(1000, failed, [(shape(0, 50, 20.0, 50), 40 * 2**30)], 80 * 2**30) == 850
    assert suggest_max_duration(1000, failed, [], 80 * 2**30) == 500  # nothing fitted: half
    assert suggest_max_duration(30, failed, [], 0) == 25  # at least one step


def test_cuda_set_device_comes_before_the_process_group(monkeypatch):
    from zipformer_pc.training import train as train_mod

    calls = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "set_device", lambda r: calls.append(("set_device", r)))
    monkeypatch.setattr(train_mod.dist, "init_process_group",
                        lambda backend, rank, world_size: calls.append(("init", backend, rank, world_size)))
    device = train_mod.setup_device(1, 2, 12399)
    assert calls == [("set_device", 1), ("init", "nccl", 1, 2)]
    assert device == torch.device("cuda", 1)
    calls.clear()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert train_mod.setup_device(0, 1, 12399) == torch.device("cpu") and calls == []


def test_the_oom_scan_is_on_by_default_on_cuda_only():
    from zipformer_pc.training.train import scan_oom_enabled
    from test_train_args import parse

    cuda, cpu = torch.device("cuda", 0), torch.device("cpu")
    args, _ = parse()
    assert scan_oom_enabled(args, cuda) and not scan_oom_enabled(args, cpu)
    args, _ = parse("--scan-oom", "false")
    assert not scan_oom_enabled(args, cuda)
    args, _ = parse("--scan-oom", "true")
    assert not scan_oom_enabled(args, cpu)


def test_the_sampler_options_reach_lhotse(tmp_path):
    from zipformer_pc.data.datamodule import PCAsrDataModule

    path = tmp_path / "cuts.jsonl.gz"
    toy_cuts(400).to_file(path)
    dm = PCAsrDataModule(None, max_duration=60)
    s = dm.train_dataloader(str(path), num_buckets=3, bucket_buffer_size=1234, num_cuts_for_bins_estimate=300).sampler
    assert (len(s.duration_bins) + 1, s.buffer_size, s.num_cuts_for_bins_estimate) == (3, 1234, 300)
    s = dm.train_dataloader(str(path)).sampler  # lhotse's defaults, the small recipe's
    assert (len(s.duration_bins) + 1, s.buffer_size, s.num_cuts_for_bins_estimate) == (10, 20000, 10000)


from test_musan import speech_and_noise  # noqa: E402,F401 (a fixture: two cuts with stored features)


def test_the_oom_scan_runs_the_worst_batches_through_the_training_step(speech_and_noise, tmp_path):
    """train.py's oom_scan on a CPU (where run() skips it): the sampler's largest batches are made
    by the training dataset and run forward and backward with full attention; the weights, the
    RNG and the encoder's chunk draws are as before."""
    from zipformer_pc.data.datamodule import PCAsrDataModule
    from zipformer_pc.data.tokenizer import Tokenizer
    from zipformer_pc.model.loss import LossConfig
    from zipformer_pc.training.optim import Eden, make_optimizer
    from zipformer_pc.training.train import Trainer, get_model, make_grad_scaler, oom_scan
    from test_train_args import parse

    cuts, _ = speech_and_noise
    manifest = tmp_path / "cuts.jsonl.gz"
    cuts.to_file(manifest)
    tok = Tokenizer(str(ROOT_DIR / "egs/synth/pretrained/bpe.model"))
    args, _ = parse("--encoder", "tiny", "--model-type", "norm", "--max-duration", "2.5")
    torch.manual_seed(0)
    model, config = get_model(args, None, tok.vocab_size, True)
    cpu = torch.device("cpu")
    opt = make_optimizer("scaled_adam", list(model.parameters()), lr=args.base_lr)
    loader = PCAsrDataModule(tok, 2.5).train_dataloader(str(manifest), num_buckets=1)
    tr = Trainer(args=args, rank=0, world_size=1, device=cpu, exp_dir=tmp_path, model=model, ddp_model=model,
                 model_config=config, model_avg=None, optimizer=opt,
                 scheduler=Eden(opt, args.lr_batches, args.lr_epochs, warmup_batches=args.warmup_batches),
                 scaler=make_grad_scaler("fp32", cpu), loss_cfg=LossConfig(backend="pruned"), train_dl=loader,
                 valid_dl=None)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    torch.manual_seed(5)
    expected = torch.rand(3)
    torch.manual_seed(5)
    model.eval()
    rows = oom_scan(tr, tok)
    assert sorted(r["criterion"] for r in rows) == ["lattice", "padded_seconds", "padded_tokens"]
    assert all("cuts" in r["batch"] for r in rows)
    assert torch.equal(torch.rand(3), expected)  # the RNG as it was
    assert not model.training and "draw_chunk_config" not in vars(model.encoder)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert all(p.grad is None for p in model.parameters())
