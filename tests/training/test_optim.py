"""Tests of zipformer_pc.training.optim: ScaledAdam and the Eden schedule."""

from __future__ import annotations

import copy
import math

import pytest
import torch
import torch.nn as nn

from zipformer_pc.training.optim import Eden, ScaledAdam, make_optimizer

torch.set_num_threads(1)


def _toy_problem(seed: int = 0):
    """A small non-linear regression problem and an MLP to fit it."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(512, 8, generator=g)
    w = torch.randn(8, 1, generator=g)
    y = torch.sin(x @ w) + 0.5 * (x[:, :1] * x[:, 1:2])
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(8, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 1))
    return x, y, model


def _train(model, opt, sched, x, y, steps: int, start: int = 0, batch: int = 64):
    losses = []
    for step in range(start, start + steps):
        idx = torch.arange(step * batch, (step + 1) * batch) % x.size(0)
        loss = ((model(x[idx]) - y[idx]) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step_batch()
        if step % 8 == 7:
            sched.step_epoch()  # 8 batches = one "epoch" of the toy data
        losses.append(loss.item())
    return losses


def _full_loss(model, x, y) -> float:
    with torch.no_grad():
        return ((model(x) - y) ** 2).mean().item()


def test_scaled_adam_with_eden_converges_on_toy_regression():
    x, y, model = _toy_problem()
    initial = _full_loss(model, x, y)
    opt = ScaledAdam(model.parameters(), lr=0.1, clipping_scale=2.0)
    sched = Eden(opt, lr_batches=100, lr_epochs=10, warmup_batches=20)
    _train(model, opt, sched, x, y, steps=400)
    final = _full_loss(model, x, y)
    # (AdamW with lr 1e-2 reaches ~0.12 in the same 400 steps)
    assert final < 0.1 * initial, (initial, final)


def test_scaled_adam_learns_parameter_scale():
    """The target weight is 30x larger than the initial one: only the scale
    update (and the relative steps) can grow it quickly, and it does."""
    torch.manual_seed(0)
    x = torch.randn(256, 16)
    w_true = torch.randn(16, 1) * 3.0
    y = x @ w_true
    w = nn.Parameter(torch.randn(16, 1) * 0.1)
    opt = ScaledAdam([w], lr=0.05, clipping_scale=None)
    for _ in range(300):
        loss = ((x @ w - y) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert w.detach().pow(2).mean().sqrt() > 1.5
    assert ((x @ w - y) ** 2).mean().item() < 1e-2 * (y ** 2).mean().item()


def test_first_step_matches_the_update_rule():
    """For the gradient g = -theta (a pure "grow" direction) the first step is
    lr * rms * sign(theta) (Adam part) + eta * lr * theta (scale part)."""
    torch.manual_seed(0)
    theta = torch.randn(6, 5)
    p = nn.Parameter(theta.clone())
    lr, eta = 0.02, 0.1
    opt = ScaledAdam([p], lr=lr, scalar_lr_scale=eta, clipping_scale=None, eps=0.0)
    p.grad = -theta.clone()
    opt.step()
    rms = theta.pow(2).mean().sqrt()
    expected = theta + lr * rms * theta.sign() + eta * lr * theta
    assert torch.allclose(p.detach(), expected, atol=1e-6)
    # and without the scale part (eta = 0) only the Adam part remains
    q = nn.Parameter(theta.clone())
    opt = ScaledAdam([q], lr=lr, scalar_lr_scale=0.0, clipping_scale=None, eps=0.0)
    q.grad = -theta.clone()
    opt.step()
    assert torch.allclose(q.detach(), theta + lr * rms * theta.sign(), atol=1e-6)


def test_updates_are_relative_to_parameter_scale():
    """Same gradient direction, parameters 100x apart in scale: the first
    step changes both by the same relative amount."""
    torch.manual_seed(0)
    base = torch.randn(10, 10)
    small = nn.Parameter(base * 0.01)
    large = nn.Parameter(base * 1.0)
    opt = ScaledAdam([small, large], lr=0.01, clipping_scale=None)
    grad = torch.randn(10, 10)
    small.grad = grad.clone()
    large.grad = grad.clone()
    before_s, before_l = small.detach().clone(), large.detach().clone()
    opt.step()
    rel_s = (small.detach() - before_s).norm() / before_s.norm()
    rel_l = (large.detach() - before_l).norm() / before_l.norm()
    assert torch.allclose(rel_s, rel_l, rtol=1e-4)
    assert 1e-3 < rel_l.item() < 0.05


def test_scalar_parameters_and_limits():
    s = nn.Parameter(torch.tensor(9.99))
    opt = ScaledAdam([s], lr=1.0, clipping_scale=None, scalar_max=10.0)
    for _ in range(5):
        s.grad = torch.tensor(-1.0)  # pushes s up
        opt.step()
    assert s.item() == pytest.approx(10.0)
    # a tensor at the maximum RMS cannot be grown further by the scale update
    p = nn.Parameter(torch.full((4, 4), 3.0))
    opt = ScaledAdam([p], lr=0.1, clipping_scale=None, param_max_rms=3.0)
    for _ in range(5):
        p.grad = -torch.ones(4, 4)  # every element pushed up, pure scale growth
        opt.step()
    # only the Adam direction step (relative, lr * rms) acts, not the scale step
    assert p.detach().pow(2).mean().sqrt().item() < 3.0 * (1 + 0.1) ** 5 + 1e-4


def test_gradient_clipping_by_median_norm():
    torch.manual_seed(0)
    p = nn.Parameter(torch.randn(20))
    opt = ScaledAdam([p], lr=0.01, clipping_scale=2.0)
    for _ in range(10):
        p.grad = torch.randn(20)
        opt.step()
        assert opt.last_clip_factor == 1.0 or opt.last_clip_factor > 0.5
    median = float(torch.tensor(opt.norm_history).median())
    p.grad = torch.randn(20) * 1000.0
    opt.step()
    assert opt.num_clipped >= 1
    assert opt.last_clip_factor < 0.01
    rms = p.detach().pow(2).mean().sqrt().item()
    expected = 2.0 * median / (p.grad.norm().item() * rms)
    assert opt.last_clip_factor == pytest.approx(expected, rel=0.05)


def test_eden_formula_and_warmup():
    p = nn.Parameter(torch.zeros(3))
    opt = ScaledAdam([p], lr=0.045)
    sched = Eden(opt, lr_batches=7500, lr_epochs=3.5, warmup_batches=500, warmup_start=0.5)
    assert sched.get_last_lr()[0] == pytest.approx(0.045 * 0.5)
    sched.step_batch(250)
    expect_factor = ((250**2 + 7500**2) / 7500**2) ** -0.25 * 0.75
    assert sched.get_last_lr()[0] == pytest.approx(0.045 * expect_factor)
    sched.step_batch(20000)
    sched.step_epoch(7)
    expect = 0.045 * ((20000**2 + 7500**2) / 7500**2) ** -0.25 * ((49 + 3.5**2) / 3.5**2) ** -0.25
    assert sched.get_last_lr()[0] == pytest.approx(expect)
    assert opt.param_groups[0]["lr"] == pytest.approx(expect)
    # monotone decay after the warm-up
    lrs = []
    for b in range(500, 5000, 500):
        sched.step_batch(b)
        lrs.append(sched.get_last_lr()[0])
    assert all(a > b for a, b in zip(lrs, lrs[1:]))


@pytest.mark.parametrize("name", ["scaled_adam", "adamw"])
def test_state_dict_round_trip_gives_identical_updates(name):
    x, y, model = _toy_problem(seed=1)
    opt = make_optimizer(name, model.parameters(), lr=0.02)
    sched = Eden(opt, lr_batches=50, lr_epochs=4, warmup_batches=10)
    _train(model, opt, sched, x, y, steps=25)

    checkpoint = {
        "model": copy.deepcopy(model.state_dict()),
        "opt": copy.deepcopy(opt.state_dict()),
        "sched": copy.deepcopy(sched.state_dict()),
    }
    # continue the original run
    _train(model, opt, sched, x, y, steps=15, start=25)
    reference = [p.detach().clone() for p in model.parameters()]
    reference_lr = sched.get_last_lr()

    # resume from the checkpoint in fresh objects
    _, _, model2 = _toy_problem(seed=99)
    model2.load_state_dict(checkpoint["model"])
    opt2 = make_optimizer(name, model2.parameters(), lr=0.02)
    sched2 = Eden(opt2, lr_batches=50, lr_epochs=4, warmup_batches=10)
    opt2.load_state_dict(checkpoint["opt"])
    sched2.load_state_dict(checkpoint["sched"])
    _train(model2, opt2, sched2, x, y, steps=15, start=25)

    assert sched2.get_last_lr() == reference_lr
    for a, b in zip(reference, model2.parameters()):
        assert torch.equal(a, b.detach())
    if name == "scaled_adam":
        assert opt2.norm_history == opt.norm_history


def test_scaled_adam_trains_tiny_zipformer_a_few_steps():
    """The optimizer runs on the real encoder (all parameter shapes, scalars
    included) and reduces a simple regression loss."""
    from zipformer_pc.model.zipformer import EncoderConfig, ZipformerEncoder

    torch.manual_seed(0)
    encoder = ZipformerEncoder(EncoderConfig.from_name("tiny", dropout=0.0)).train()
    opt = ScaledAdam(encoder.parameters(), lr=0.045)
    sched = Eden(opt, lr_batches=100, lr_epochs=1, warmup_batches=0)
    x = torch.randn(2, 71, 80)
    x_lens = torch.tensor([71, 60])
    target = torch.randn(2, 16, encoder.output_dim).clamp(-1, 1)
    initial = {name: p.detach().clone() for name, p in encoder.named_parameters()}
    losses = []
    for _ in range(8):
        out, lens = encoder(x, x_lens, chunk_size=16, left_context_frames=32)
        loss = ((out - target) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step_batch()
        losses.append(loss.item())
    assert all(math.isfinite(v) for v in losses)
    assert losses[-1] < losses[0]
    # every tensor moves by a visible relative amount (none is stuck at a
    # zero initialisation, where scale-relative steps would vanish)
    for name, p in encoder.named_parameters():
        change = (p.detach() - initial[name]).norm() / initial[name].norm().clamp(min=1e-2)
        assert change > 1e-3, (name, change)


def _reference_scaled_adam(params, grads_per_step, lr, eta=0.1, betas=(0.9, 0.98), eps=1e-8,
                           clipping_scale=2.0, min_rms=1e-5, max_rms=3.0, scalar_max=10.0):
    """The update rule of the module docstring, one tensor at a time, in
    float64: what the batched implementation must reproduce."""
    beta1, beta2 = betas
    params = [p.detach().double().clone() for p in params]
    state = [dict(m=torch.zeros_like(p), v=torch.zeros_like(p), n=0.0, w=0.0) for p in params]
    history = []
    for t, grads in enumerate(grads_per_step, start=1):
        grads = [g.double() for g in grads]
        rms = [max(p.pow(2).mean().sqrt().item(), min_rms) if p.numel() > 1 else 1.0 for p in params]
        norm = math.sqrt(sum((r * g.norm().item()) ** 2 for r, g in zip(rms, grads)))
        factor = 1.0
        if history and norm > clipping_scale * float(torch.tensor(history).median()):
            factor = clipping_scale * float(torch.tensor(history).median()) / norm
        history.append(norm)
        for p, g, r, st in zip(params, grads, rms, state):
            g = g * factor
            st["m"] = beta1 * st["m"] + (1 - beta1) * g
            st["v"] = beta2 * st["v"] + (1 - beta2) * g * g
            direction = (st["m"] / (1 - beta1 ** t)) / ((st["v"] / (1 - beta2 ** t)).sqrt() + eps)
            if p.numel() == 1:
                p.add_(-lr * eta * direction).clamp_(-scalar_max, scalar_max)
                continue
            h = (g * p / r).sum().item()
            st["n"] = beta1 * st["n"] + (1 - beta1) * h
            st["w"] = beta2 * st["w"] + (1 - beta2) * h * h
            delta_r = -eta * lr * r * (st["n"] / (1 - beta1 ** t)) / (math.sqrt(st["w"] / (1 - beta2 ** t)) + eps)
            if r >= max_rms:
                delta_r = min(delta_r, 0.0)
            if r <= min_rms:
                delta_r = max(delta_r, 0.0)
            p.mul_(1 + delta_r / r).add_(-lr * r * direction)
    return params


def test_batched_update_follows_the_rule_tensor_by_tensor():
    """Many steps with clipping (two huge gradients), scalars, a tensor at the
    RMS limit and one without a gradient: the batched implementation equals
    the per-tensor rule of the docstring within float32 rounding."""
    torch.manual_seed(0)
    params = [nn.Parameter(torch.randn(7, 5)), nn.Parameter(torch.randn(16) * 0.01),
              nn.Parameter(torch.tensor(0.3)), nn.Parameter(torch.full((3, 3), 3.0)),
              nn.Parameter(torch.tensor([-2.0]))]
    frozen = nn.Parameter(torch.randn(4))  # never gets a gradient: untouched
    frozen_before = frozen.detach().clone()
    initial = [p.detach().clone() for p in params]
    opt = ScaledAdam(params + [frozen], lr=0.03)
    steps = []
    for i in range(40):
        scale = 1000.0 if i in (15, 30) else 1.0
        steps.append([torch.randn(p.shape) * scale for p in params])
    for grads in steps:
        for p, g in zip(params, grads):
            p.grad = g.clone()
        opt.step()
    assert opt.num_clipped >= 2
    expected = _reference_scaled_adam(initial, steps, lr=0.03)
    for p, e in zip(params, expected):
        assert torch.allclose(p.detach().double(), e, rtol=1e-4, atol=1e-6), (p, e)
    assert torch.equal(frozen.detach(), frozen_before)


def test_make_optimizer_rejects_unknown_name():
    with pytest.raises(ValueError):
        make_optimizer("sgd", [nn.Parameter(torch.zeros(2))])


def test_step_keeps_every_tensor_on_the_parameters_device(monkeypatch):
    """Parameters on the ``meta`` device, which like CUDA refuses a CPU vector in
    an operation with its tensors: the step builds its helper tensors (the
    per-tensor sqrt(numel), the bias corrections) on the parameters' device and
    keeps its per-tensor factors there (no ``.tolist()``, which a meta tensor
    cannot do, as it would make a CUDA step wait for the GPU). The clipping
    factor, one host number a step, is the only thing stubbed."""
    from zipformer_pc.training import optim

    params = [nn.Parameter(torch.randn(7, 5, device="meta")), nn.Parameter(torch.randn(16, device="meta")),
              nn.Parameter(torch.randn((), device="meta"))]
    for p in params:
        p.grad = torch.randn(p.shape, device="meta")
    opt = ScaledAdam(params, lr=0.03)
    monkeypatch.setattr(opt, "_clip_factor", lambda terms: 1.0)
    opt.step()
    opt.step()
    assert all(p.device.type == "meta" for p in params)
    assert all(v.device.type == "meta" for st in opt.state.values() for v in st.values() if torch.is_tensor(v))
    assert not optim._host_scalars(torch.device("meta")) and not optim._host_scalars(torch.device("cuda"))


def test_device_path_equals_the_cpu_path(monkeypatch):
    """The update with per-tensor factors kept as tensors (the path of a GPU)
    gives the CPU path's parameters, over steps with clipping."""
    from zipformer_pc.training import optim

    def run(host: bool):
        monkeypatch.setattr(optim, "_host_scalars", lambda device: host)
        torch.manual_seed(0)
        params = [nn.Parameter(torch.randn(7, 5)), nn.Parameter(torch.randn(16) * 0.01),
                  nn.Parameter(torch.tensor(0.3)), nn.Parameter(torch.full((3, 3), 3.0))]
        opt = ScaledAdam(params, lr=0.03)
        for i in range(20):
            for p in params:
                p.grad = torch.randn(p.shape) * (1000.0 if i == 10 else 1.0)
            opt.step()
        assert opt.num_clipped >= 1
        return [p.detach().clone() for p in params]

    for a, b in zip(run(True), run(False)):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)
