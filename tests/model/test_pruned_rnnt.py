"""The plain-PyTorch pruned RNN-T loss against torchaudio's full RNN-T loss."""

import pytest
import torch

from zipformer_pc.model.joiner import Joiner
from zipformer_pc.model.pruned_rnnt import connect_windows, lattice_loss, prune_ranges, pruned_rnnt_loss, simple_lattice

torchaudio = pytest.importorskip("torchaudio")

V, C = 12, 16


def batch(seed=0, n=3, t_max=20, u_max=6):
    g = torch.Generator().manual_seed(seed)
    t_lens = torch.tensor([t_max, t_max - 5, t_max - 9][:n])
    u_lens = torch.tensor([u_max, u_max - 2, 1][:n])
    y = torch.randint(1, V, (n, u_max), generator=g)
    for i in range(n):
        y[i, u_lens[i]:] = 0
    return g, t_lens, u_lens, y


def full_loss(logits, y, t_lens, u_lens):
    return torchaudio.functional.rnnt_loss(logits, y.int(), t_lens.int(), u_lens.int(), blank=0, reduction="none")


def arcs_of(logits, y):
    """(px, py) of full (N, T, U+1, V) logits."""
    logp = logits.log_softmax(-1)
    u = y.size(1)
    px = logp[:, :, :u].gather(3, y[:, None, :, None].expand(-1, logp.size(1), -1, 1)).squeeze(3)
    return px, logp[..., 0]


def test_lattice_recursion_equals_torchaudio_loss_and_gradient():
    g, t_lens, u_lens, y = batch()
    logits = torch.randn(3, 20, 7, V, generator=g, dtype=torch.float64).float().requires_grad_()
    ours = lattice_loss(*arcs_of(logits, y), t_lens, u_lens)
    ref = full_loss(logits, y, t_lens, u_lens)
    assert torch.allclose(ours.float(), ref, rtol=1e-5, atol=1e-4)
    g_ours, = torch.autograd.grad(ours.sum(), logits)
    g_ref, = torch.autograd.grad(ref.sum(), logits)
    assert torch.allclose(g_ours, g_ref, atol=1e-5)


def test_simple_lattice_is_the_rnnt_loss_of_the_trivial_joiner():
    g, t_lens, u_lens, y = batch(1)
    am, lm = torch.randn(3, 20, V, generator=g), torch.randn(3, 7, V, generator=g)
    px, py = simple_lattice(am, lm, y, blank_id=0)
    ref = full_loss(am[:, :, None, :] + lm[:, None, :, :], y, t_lens, u_lens)
    assert torch.allclose(lattice_loss(px, py, t_lens, u_lens).float(), ref, rtol=1e-5, atol=1e-4)
    # smoothing mixes in the predictor-only and encoder-only log-probabilities
    pxs, pys = simple_lattice(am, lm, y, blank_id=0, lm_scale=0.25, am_scale=0.1)
    lm_only = lm.log_softmax(-1)[:, :6].gather(2, y[:, :, None]).squeeze(2)
    am_only = am.log_softmax(-1).gather(2, y[:, None, :].expand(-1, 20, -1))
    assert torch.allclose(pxs, 0.65 * px + 0.25 * lm_only[:, None, :] + 0.1 * am_only, atol=1e-5)


def make_inputs(seed, n=3, t_max=20, u_max=6):
    g, t_lens, u_lens, y = batch(seed, n, t_max, u_max)
    torch.manual_seed(seed)
    joiner = Joiner(C, C, C, V)
    am_proj, lm_proj = torch.nn.Linear(C, V), torch.nn.Linear(C, V)
    enc = torch.randn(n, t_max, C, generator=g).requires_grad_()
    dec = torch.randn(n, u_max + 1, C, generator=g).requires_grad_()
    return enc, dec, joiner, am_proj, lm_proj, y, t_lens, u_lens


def test_pruned_loss_without_pruning_equals_the_full_loss():
    enc, dec, joiner, am_proj, lm_proj, y, t_lens, u_lens = make_inputs(2)
    simple, pruned = pruned_rnnt_loss(enc, t_lens, dec, joiner, am_proj, lm_proj, y, u_lens, prune_range=7)
    ref = full_loss(joiner(enc[:, :, None], dec[:, None]), y, t_lens, u_lens).sum()
    assert torch.allclose(pruned, ref, rtol=1e-5)
    g_ours = torch.autograd.grad(pruned, [enc, dec, joiner.output_linear.weight])
    g_ref = torch.autograd.grad(ref, [enc, dec, joiner.output_linear.weight])
    for a, b in zip(g_ours, g_ref):
        assert torch.allclose(a, b, atol=1e-4)
    assert simple.requires_grad and torch.isfinite(simple)


@pytest.mark.parametrize("s_range", [2, 3, 5])
def test_pruning_keeps_connected_windows_and_bounds_the_full_loss(s_range):
    enc, dec, joiner, am_proj, lm_proj, y, t_lens, u_lens = make_inputs(3)
    _, pruned = pruned_rnnt_loss(enc, t_lens, dec, joiner, am_proj, lm_proj, y, u_lens, prune_range=s_range)
    full = full_loss(joiner(enc[:, :, None], dec[:, None]), y, t_lens, u_lens).sum()
    assert torch.isfinite(pruned) and pruned >= full - 1e-3  # fewer paths: never more likely

    px, py = simple_lattice(am_proj(enc), lm_proj(dec), y, 0)
    gpx, gpy = torch.autograd.grad(lattice_loss(px, py, t_lens, u_lens).sum(), [px, py])
    start = prune_ranges(-gpx, -gpy, t_lens, u_lens, s_range)
    for i in range(3):
        s, last = start[i, : t_lens[i]], int(t_lens[i]) - 1
        assert s[0] == 0 and bool((s[1:] >= s[:-1]).all()) and bool((s[1:] - s[:-1] <= s_range - 1).all())
        assert s[last] <= u_lens[i] <= s[last] + s_range - 1


def test_posteriors_of_the_simple_lattice_sum_to_one_per_frame():
    _, t_lens, u_lens, y = batch(4)
    g = torch.Generator().manual_seed(4)
    px, py = simple_lattice(torch.randn(3, 20, V, generator=g), torch.randn(3, 7, V, generator=g), y, 0)
    px.requires_grad_(), py.requires_grad_()
    gpx, gpy = torch.autograd.grad(lattice_loss(px, py, t_lens, u_lens).sum(), [px, py])
    # every path leaves each frame by exactly one blank arc
    blank_mass = -gpy.sum(dim=2)
    for i in range(3):
        assert torch.allclose(blank_mass[i, : t_lens[i]].double(), torch.ones(int(t_lens[i]), dtype=torch.float64),
                              atol=1e-4)


def small_conditioned_model():
    """A conditioned transducer with a 1-layer-per-stack tiny encoder and simple projections."""
    from zipformer_pc.model.transducer import HeadConfig, build_model, make_model_config

    torch.manual_seed(0)
    head = HeadConfig(model_type="conditioned", vocab_size=V, decoder_dim=32, joiner_dim=32, mode_dim=4,
                      with_simple_proj=True)
    cfg = make_model_config("tiny", {"encoder_dim": "32", "feedforward_dim": "64", "num_heads": "2",
                                     "encoder_unmasked_dim": "32", "num_encoder_layers": "1,1,1,1,1,1"}, head)
    return build_model(cfg)


def test_model_trains_with_the_pruned_backend_without_k2():
    """--loss pruned: the transducer's loss goes through this module when k2 is absent."""
    from zipformer_pc.model import loss as loss_mod

    if loss_mod.k2_available():
        pytest.skip("k2 imports: --loss pruned runs k2's loss")
    assert loss_mod.resolve_backend("pruned") == "pruned"
    model = small_conditioned_model()
    feats, lens = torch.randn(2, 160, 80), torch.tensor([160, 120])
    lcfg = loss_mod.LossConfig(backend="pruned", prune_range=3)
    out = model(feats, lens, [[3, 4, 5], [6, 7]], [[3, 4, 5, 8], None], loss_cfg=lcfg)
    assert torch.isfinite(out["loss"]) and int(out["num_p"]) == 1
    out["loss"].backward()
    assert model.simple_am_proj is not None
    grads = [p.grad for p in model.parameters() if p.requires_grad]
    assert all(g is not None for g in grads[:5]) and any(float(g.abs().sum()) > 0 for g in grads if g is not None)


def test_the_pruned_loss_runs_in_float32_under_bfloat16_autocast():
    """A forward under torch.autocast(cpu, bfloat16) (benchmarks/train_speed.py --autocast bf16)
    hands bfloat16 activations to the loss, which runs the lattice in float32 and stays close to
    the float32 loss of the same weights."""
    from zipformer_pc.model import loss as loss_mod

    if loss_mod.k2_available():
        pytest.skip("k2 imports: --loss pruned runs k2's loss")
    model = small_conditioned_model().eval()
    feats, lens = torch.randn(2, 160, 80), torch.tensor([160, 120])
    lcfg = loss_mod.LossConfig(backend="pruned", prune_range=3)
    args = (feats, lens, [[3, 4, 5], [6, 7]], [[3, 4, 5, 8], None])
    ref = model(*args, loss_cfg=lcfg)["loss"]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(*args, loss_cfg=lcfg)["loss"]
    assert out.dtype == torch.float32 and torch.isfinite(out)
    assert abs(float(out.detach()) - float(ref.detach())) < 0.05 * abs(float(ref.detach()))
    out.backward()


def test_simple_loss_gradient_after_its_posteriors_were_taken_for_pruning():
    """pruned_rnnt_loss asks the simple lattice for its arc posteriors (the
    pruning bounds) before the training loss's backward: the second backward,
    scaled as the loss weights it, must still be torchaudio's gradient."""
    enc, dec, joiner, am_proj, lm_proj, y, t_lens, u_lens = make_inputs(5)
    simple, _ = pruned_rnnt_loss(enc, t_lens, dec, joiner, am_proj, lm_proj, y, u_lens, prune_range=3, lm_scale=0.0)
    ref = full_loss(am_proj(enc)[:, :, None, :] + lm_proj(dec)[:, None, :, :], y, t_lens, u_lens).sum()
    assert torch.allclose(simple, ref, rtol=1e-5)
    g_ours = torch.autograd.grad(0.3 * simple, [enc, dec, am_proj.weight])
    g_ref = torch.autograd.grad(0.3 * ref, [enc, dec, am_proj.weight])
    for a, b in zip(g_ours, g_ref):
        assert torch.allclose(a, b, atol=1e-5)


def sequential_bounds(start, t_lens, max_start, step):
    """The window constraints of prune_ranges, frame by frame."""
    start = start.clone()
    for t in range(1, start.size(1)):
        start[:, t] = torch.minimum(start[:, t], start[:, t - 1] + step)
    start[torch.arange(start.size(0)), t_lens - 1] = max_start
    for t in range(start.size(1) - 2, -1, -1):
        start[:, t] = torch.maximum(start[:, t], start[:, t + 1] - step)
    start[:, 0] = 0
    return start


@pytest.mark.parametrize("seed", range(4))
def test_window_scans_equal_the_frame_by_frame_rule(seed):
    g = torch.Generator().manual_seed(seed)
    n, t_max, step = 5, 40, 2
    t_lens = torch.randint(1, t_max + 1, (n,), generator=g)
    max_start = torch.randint(0, 30, (n,), generator=g)
    start = torch.randint(0, 30, (n, t_max), generator=g)
    start[:, 0] = 0
    start = torch.cummax(start, dim=1).values  # as prune_ranges gives it: jumps of any size
    got = connect_windows(start, t_lens, max_start, step)
    assert torch.equal(got, sequential_bounds(start, t_lens, max_start, step))


def brute_force_pruned(enc, dec, joiner, y, t_lens, u_lens, start, s_range):
    """The pruned loss by a frame-by-frame dynamic programme over the kept nodes (float64, autograd
    through it): node (t, u) is kept when start[t] <= u < start[t] + s_range; a path moves by the
    blank arcs and symbol arcs of kept nodes only and ends with the blank leaving (T-1, U)."""
    logp = joiner(enc[:, :, None], dec[:, None]).double().log_softmax(-1)  # (N, T, U+1, V)
    total = 0.0
    for i in range(enc.size(0)):
        t_n, u_n = int(t_lens[i]), int(u_lens[i])
        ninf = torch.tensor(float("-inf"), dtype=torch.float64)
        alpha = {}
        for t in range(t_n):
            for u in range(u_n + 1):
                if not start[i, t] <= u < start[i, t] + s_range:
                    continue
                terms = [torch.tensor(0.0, dtype=torch.float64)] if t == u == 0 else []
                if (t - 1, u) in alpha:
                    terms.append(alpha[(t - 1, u)] + logp[i, t - 1, u, 0])
                if (t, u - 1) in alpha:
                    terms.append(alpha[(t, u - 1)] + logp[i, t, u - 1, y[i, u - 1]])
                alpha[(t, u)] = torch.logsumexp(torch.stack(terms), 0) if terms else ninf
        total = total - (alpha[(t_n - 1, u_n)] + logp[i, t_n - 1, u_n, 0])
    return total


def windows_of(enc, dec, am_proj, lm_proj, y, t_lens, u_lens, s_range, lm_scale=0.25):
    """The window starts pruned_rnnt_loss draws from its simple lattice."""
    px, py = simple_lattice(am_proj(enc), lm_proj(dec), y, 0, lm_scale)
    gpx, gpy = torch.autograd.grad(lattice_loss(px, py, t_lens, u_lens).sum(), [px, py])
    return prune_ranges(-gpx, -gpy, t_lens, u_lens, s_range)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("s_range", [2, 3])
def test_the_pruned_loss_and_its_gradients_equal_a_dynamic_programme_over_the_kept_nodes(s_range, dtype):
    """Removed arcs by masks (blank 0 in the sums, -inf symbol arcs and nodes) leave exactly the
    paths through the kept nodes, in float64 and in float32."""
    enc, dec, joiner, am_proj, lm_proj, y, t_lens, u_lens = make_inputs(6)
    start = windows_of(enc, dec, am_proj, lm_proj, y, t_lens, u_lens, s_range)
    _, pruned = pruned_rnnt_loss(enc, t_lens, dec, joiner, am_proj, lm_proj, y, u_lens, prune_range=s_range,
                                 lattice_dtype=dtype)
    ref = brute_force_pruned(enc, dec, joiner, y, t_lens, u_lens, start, s_range)
    assert torch.allclose(pruned.double(), ref, rtol=1e-5)
    params = [enc, dec, joiner.output_linear.weight, joiner.decoder_proj.weight]
    for a, b in zip(torch.autograd.grad(pruned, params), torch.autograd.grad(ref, params)):
        assert torch.allclose(a.double(), b.double(), atol=1e-4 if dtype == torch.float32 else 1e-5)


def test_float32_lattices_agree_with_float64_at_librispeech_lengths(monkeypatch):
    """lattice_dtype=float32 at 400 frames and 100 tokens (the cumulative sums of a whole row):
    with the same pruning windows, losses within 1e-6 relative and gradients within 5e-3 (relative
    to their norm) of float64's.  (Posteriors that differ by that much may move a pruning window
    where two are nearly as likely; either window is a valid pruning.)"""
    from zipformer_pc.model import pruned_rnnt

    g = torch.Generator().manual_seed(7)
    n, t_max, u_max, v, c = 3, 400, 100, 64, 32
    torch.manual_seed(7)
    joiner, am_proj, lm_proj = Joiner(c, c, c, v), torch.nn.Linear(c, v), torch.nn.Linear(c, v)
    enc = torch.randn(n, t_max, c, generator=g).requires_grad_()
    dec = torch.randn(n, u_max + 1, c, generator=g).requires_grad_()
    t_lens, u_lens = torch.tensor([400, 380, 360]), torch.tensor([100, 90, 80])
    y = torch.randint(1, v, (n, u_max), generator=g)
    start = windows_of(enc, dec, am_proj, lm_proj, y, t_lens, u_lens, 5)
    monkeypatch.setattr(pruned_rnnt, "prune_ranges", lambda *a, **k: start)
    out = {}
    for dtype in (torch.float64, torch.float32):
        simple, pruned = pruned_rnnt_loss(enc, t_lens, dec, joiner, am_proj, lm_proj, y, u_lens, prune_range=5,
                                          lattice_dtype=dtype)
        out[dtype] = (simple, pruned, torch.autograd.grad(0.5 * simple + pruned, [enc, dec]))
    (s64, p64, g64), (s32, p32, g32) = out[torch.float64], out[torch.float32]
    s32, s64, p32, p64 = (float(v.detach()) for v in (s32, s64, p32, p64))
    assert abs(s32 - s64) < 1e-6 * s64 and abs(p32 - p64) < 1e-6 * p64
    for a, b in zip(g32, g64):
        assert float((a - b).norm()) < 5e-3 * float(b.norm())
