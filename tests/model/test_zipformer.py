"""Tests of the streaming Zipformer encoder (zipformer_pc.model.zipformer and its
building blocks in zipformer_pc.model.scaling / zipformer_pc.model.subsampling).

All forward passes use the ``tiny`` configuration and a few seconds of
features so the file runs in well under a minute on two CPU cores; the
``paper`` configuration is only constructed (parameter count) and run once
on a very short input.
"""

from __future__ import annotations

import math
from typing import List, Tuple

import pytest
import torch

from zipformer_pc.model.scaling import (
    Balancer,
    BiasNorm,
    SharedDropout,
    Whiten,
    convert_num_channels,
    load_whiten_state,
    softplus,
    swoosh_l,
    swoosh_r,
    whiten_state,
    whitening_metric,
)
from zipformer_pc.model.subsampling import Conv2dSubsampling
from zipformer_pc.model.zipformer import (
    ENCODER_CONFIGS,
    AttentionWindow,
    EncoderConfig,
    ZipformerEncoder,
    count_parameters,
    _main,
    estimate_transducer_parameters,
    relative_position_index,
    relative_position_table,
)

torch.set_num_threads(2)


def _tiny(seed: int = 0, **overrides) -> ZipformerEncoder:
    torch.manual_seed(seed)
    return ZipformerEncoder(EncoderConfig.from_name("tiny", **overrides))


def _make_modules_matter(encoder: ZipformerEncoder, seed: int = 1) -> ZipformerEncoder:
    """At initialisation the residual modules are scaled down (output
    projections start small), so attention contributes little and a parity
    test would be weak.  Scale the output projections up and open the bypasses
    so that the chunk/left-context settings change the output a lot."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in encoder.named_parameters():
            if "out_proj" in name:
                p.mul_(10.0)
            elif name.endswith(".scale"):
                p.copy_(0.6 + 0.35 * torch.rand(p.shape, generator=g))
            elif name.endswith("weights"):  # downsampling weights
                p.copy_(torch.randn(p.shape, generator=g))
    return encoder


def _stream(
    encoder: ZipformerEncoder, x: torch.Tensor, x_lens: torch.Tensor, chunk: int, left: int
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Run ``streaming_forward`` chunk by chunk over a padded batch, following
    the documented contract (windows of 2c+7 frames, shift 2c)."""
    n, t, _ = x.shape
    need = encoder.chunk_feature_frames(chunk)
    shift = encoder.chunk_shift_frames(chunk)
    num_chunks = math.ceil(Conv2dSubsampling.output_lengths(torch.tensor(t)).item() / chunk)
    states = encoder.get_init_states(n, chunk, left)
    shapes = [s.shape for s in states]
    outs: List[torch.Tensor] = []
    total = torch.zeros(n, dtype=torch.int64)
    for k in range(num_chunks):
        start = k * shift
        window = x[:, start : start + need]
        if window.size(1) < need:
            window = torch.nn.functional.pad(window, (0, 0, 0, need - window.size(1)))
        window_lens = torch.clamp(x_lens - start, 0, need)
        out, out_lens, states = encoder.streaming_forward(window, window_lens, states)
        assert out.shape == (n, chunk // 2, encoder.output_dim)
        assert [s.shape for s in states] == shapes  # fixed-shape states
        outs.append(out)
        total += out_lens
    return torch.cat(outs, dim=1), total


# ---------------------------------------------------------------------------
# building blocks


def test_swoosh_values_and_stability():
    x = torch.linspace(-20, 20, 401, dtype=torch.float64)
    ref_r = torch.log1p(torch.exp(x - 1)) - 0.08 * x - 0.313261687
    ref_l = torch.log1p(torch.exp(x - 4)) - 0.08 * x - 0.035
    assert torch.allclose(swoosh_r(x), ref_r, atol=1e-10)
    assert torch.allclose(swoosh_l(x), ref_l, atol=1e-10)
    assert abs(swoosh_r(torch.tensor(0.0)).item()) < 1e-6
    big = torch.tensor([-1e4, -100.0, 100.0, 1e4, 3e38])
    for y in (swoosh_r(big), swoosh_l(big)):
        assert torch.isfinite(y).all()
    # gradients are finite too, and the slope tends to -0.08 / 0.92
    xg = torch.tensor([-1e4, 1e4], requires_grad=True)
    swoosh_r(xg).sum().backward()
    assert torch.allclose(xg.grad, torch.tensor([-0.08, 0.92]))


@pytest.mark.parametrize("dtype,rtol,atol", [(torch.float32, 2.5e-7, 6e-8), (torch.float64, 5e-16, 1.2e-16)])
def test_softplus_equals_torch_softplus(dtype, rtol, atol):
    # exp/log instead of log1p: the same values to rounding (a few ulps), and
    # half an ulp of 1 where exp(z) is lost in 1 + exp(z); exactly z above the
    # threshold 20, finite everywhere
    z = torch.cat([torch.linspace(-120, 120, 4801, dtype=dtype),
                   torch.tensor([-3e38, -1e4, 19.999, 20.0, 20.001, 88.0, 89.0, 1e4, 3e38], dtype=dtype)])
    ref = torch.nn.functional.softplus(z)
    ours = softplus(z)
    torch.testing.assert_close(ours, ref, rtol=rtol, atol=atol)
    assert torch.equal(ours[z > 20], z[z > 20])
    assert torch.isfinite(ours).all() and (ours >= 0).all()


@pytest.mark.parametrize("dtype,atol", [(torch.float16, 1e-3), (torch.bfloat16, 8e-3)])
def test_softplus_does_not_overflow_in_half_precision(dtype, atol):
    # fp16's exp is inf above ~11.1: below its threshold softplus stays finite,
    # above it returns z (softplus(z) - z < 5e-5 there, under half an ulp)
    z = torch.linspace(-30, 70, 2001, dtype=torch.float32)
    ours = softplus(z.to(dtype))
    assert ours.dtype == dtype and torch.isfinite(ours).all()
    torch.testing.assert_close(ours.float(), torch.nn.functional.softplus(z), rtol=1e-2, atol=atol)
    for fn in (swoosh_r, swoosh_l):
        assert torch.isfinite(fn(z.to(dtype))).all()


@pytest.mark.parametrize("fn,shift,offset", [(swoosh_r, 1.0, 0.313261687), (swoosh_l, 4.0, 0.035)])
def test_swoosh_training_path_matches_the_plain_expression(fn, shift, offset):
    # with gradients the lean autograd function runs; values and gradients
    # must equal autograd through the plain formula
    x = torch.linspace(-30, 30, 1203, dtype=torch.float64).reshape(3, 401)
    a = x.clone().requires_grad_(True)
    b = x.clone().requires_grad_(True)
    w = torch.randn(3, 401, dtype=torch.float64)
    ya = fn(a)
    yb = torch.nn.functional.softplus(b - shift) - 0.08 * b - offset
    assert ya.grad_fn is not None and "Swoosh" in type(ya.grad_fn).__name__
    torch.testing.assert_close(ya, yb, rtol=0, atol=1e-12)
    (ya * w).sum().backward()
    (yb * w).sum().backward()
    # softplus's own backward rounds sigmoid(x) to 1 for x > 20 (its threshold):
    # differences up to ~3e-9 there, exact elsewhere
    torch.testing.assert_close(a.grad, b.grad, rtol=0, atol=1e-8)
    with torch.no_grad():
        torch.testing.assert_close(fn(x), yb.detach(), rtol=0, atol=1e-12)


def test_bias_norm():
    norm = BiasNorm(8)
    with torch.no_grad():
        norm.bias.copy_(torch.arange(8.0) / 8)
        norm.log_scale.fill_(math.log(2.0))
    x = torch.randn(3, 5, 8)
    y = norm(x)
    rms = ((x - norm.bias) ** 2).mean(-1, keepdim=True).sqrt()
    assert torch.allclose(y, 2.0 * x / rms, atol=1e-5)
    # zero input with zero bias does not produce NaN
    assert torch.isfinite(BiasNorm(4)(torch.zeros(2, 4))).all()


def test_convert_num_channels():
    x = torch.randn(2, 3, 5)
    assert torch.equal(convert_num_channels(x, 3), x[..., :3])
    y = convert_num_channels(x, 7)
    assert y.shape == (2, 3, 7) and torch.equal(y[..., :5], x) and (y[..., 5:] == 0).all()


def test_balancer_changes_only_the_gradient_of_bad_channels():
    torch.manual_seed(0)
    x = torch.randn(200, 3)
    x[:, 0] = -x[:, 0].abs()  # never positive: should be pushed up
    x[:, 2] *= 50.0  # far too large: magnitudes pushed down
    balancer = Balancer(3, min_positive=0.05, max_positive=0.95, min_abs=0.2, max_abs=10.0,
                        grad_scale=0.1, prob=1.0).train()
    upstream = torch.randn(200, 3)
    xr = x.clone().requires_grad_(True)
    y = balancer(xr)
    assert torch.equal(y, x)
    y.backward(upstream)
    delta = xr.grad - upstream
    assert (delta[:, 0] < 0).all()  # descent increases channel 0
    assert torch.equal(delta[:, 1], torch.zeros(200))  # balanced channel untouched
    assert torch.allclose(delta[:, 2].sign(), x[:, 2].sign())  # shrinks |x|
    # eval mode: plain identity, gradient untouched
    xr2 = x.clone().requires_grad_(True)
    balancer.eval()(xr2).backward(upstream)
    assert torch.equal(xr2.grad, upstream)


def test_whiten_penalty_reduces_anisotropy():
    torch.manual_seed(0)
    white = torch.randn(4000, 16)
    assert whitening_metric(white) < 1.1
    rank_one = torch.randn(500, 1) * torch.randn(1, 16)
    assert whitening_metric(rank_one) > 15.0
    whiten = Whiten(whitening_limit=2.0, grad_scale=0.5, prob=(1.0, 1.0)).train()
    x = (torch.randn(500, 16) + 3.0 * torch.randn(500, 1)).requires_grad_(True)
    start = whitening_metric(x.detach()).item()
    assert start > 2.0
    upstream = torch.randn(500, 16)
    y = whiten(x)
    assert torch.equal(y, x)
    y.backward(upstream)
    extra = x.grad - upstream
    # the added term has the requested relative size ...
    assert extra.norm().item() == pytest.approx(0.5 * upstream.norm().item(), rel=1e-4)
    # ... and a descent step along it makes the features whiter
    with torch.no_grad():
        stepped = x - 0.2 * extra
    assert whitening_metric(stepped).item() < start - 0.1
    # below the limit nothing changes
    w = Whiten(whitening_limit=100.0, prob=(1.0, 1.0)).train()
    xr = white.clone().requires_grad_(True)
    g = torch.randn(4000, 16)
    w(xr).backward(g)
    assert torch.equal(xr.grad, g)


def _bad_channels() -> torch.Tensor:
    x = torch.randn(200, 3)
    x[:, 0] = -x[:, 0].abs()  # never positive: the balancer acts on it
    return x


def test_balancer_acts_on_its_share_of_the_calls():
    x, upstream = _bad_channels(), torch.randn(200, 3)
    for prob, low, high in ((0.5, 150, 250), (0.0, 0, 0), (1.0, 400, 400)):
        balancer = Balancer(3, prob=prob).train()
        acted = 0
        for _ in range(400):
            xr = x.clone().requires_grad_(True)
            balancer(xr).backward(upstream)
            acted += int(not torch.equal(xr.grad, upstream))
        assert low <= acted <= high, (prob, acted)
    with pytest.raises(ValueError, match="prob"):
        Balancer(3, prob=1.5)


def test_whiten_checks_rarely_while_white_and_often_after_a_breach():
    torch.manual_seed(0)
    white = torch.randn(2000, 16)
    skewed = torch.randn(500, 16) + 3.0 * torch.randn(500, 1)

    def acts(w: Whiten, x: torch.Tensor) -> bool:
        xr = x.clone().requires_grad_(True)
        g = torch.ones_like(x)
        w(xr).backward(g)
        return not torch.equal(xr.grad, g)

    # (low, high) = (0, 1): the first call measures (nothing known yet) ...
    w = Whiten(whitening_limit=2.0, grad_scale=0.5, prob=(0.0, 1.0)).train()
    assert w.exceeded is None
    assert not acts(w, white) and w.exceeded is False
    # ... then, white as last measured, it never looks (even at skewed input) ...
    assert not any(acts(w, skewed) for _ in range(20)) and w.exceeded is False
    # ... while after a breach it measures and acts on every call.
    w2 = Whiten(whitening_limit=2.0, grad_scale=0.5, prob=(0.0, 1.0)).train()
    assert all(acts(w2, skewed) for _ in range(5)) and w2.exceeded is True
    with pytest.raises(ValueError, match="prob"):
        Whiten(prob=(0.5, 0.1))


def test_whiten_state_round_trips_by_module_name():
    a, b = _tiny(seed=0), _tiny(seed=1)
    names = list(whiten_state(a))
    assert len(names) >= 6 and all(v is None for v in whiten_state(a).values())
    for i, (name, m) in enumerate((n, m) for n, m in a.named_modules() if isinstance(m, Whiten)):
        m.exceeded = i % 2 == 0
    load_whiten_state(b, whiten_state(a))
    assert whiten_state(b) == whiten_state(a) and True in whiten_state(b).values()
    load_whiten_state(b, {})  # a checkpoint from before: every whitener starts unmeasured
    assert all(v is None for v in whiten_state(b).values())


def test_shared_dropout_drops_whole_channels_of_an_utterance():
    torch.manual_seed(0)
    drop = SharedDropout(0.25).train()
    x = torch.ones(8, 50, 64)
    y = drop(x)
    # one mask per (utterance, channel), the same at every frame
    assert torch.equal(y, y[:, :1, :].expand_as(y))
    assert ((y == 0) | torch.isclose(y, torch.tensor(1.0 / 0.75))).all()
    dropped = (y[:, 0, :] == 0).float().mean().item()
    assert 0.15 < dropped < 0.35  # 512 draws at p = 0.25
    assert y.mean().item() == pytest.approx(1.0, abs=0.15)  # kept values rescaled
    # identity when not training or at p = 0
    assert drop.eval()(x) is x
    assert SharedDropout(0.0).train()(x) is x
    with pytest.raises(ValueError, match="probability"):
        SharedDropout(1.0)


def test_regularizers_do_not_change_the_forward_pass():
    x = torch.randn(2, 101, 80)
    outs = []
    for use in (True, False):
        encoder = _tiny(seed=3, use_regularizers=use).train()
        torch.manual_seed(4)
        out, _ = encoder(x, torch.tensor([101, 77]))
        outs.append(out.detach())
    assert torch.equal(outs[0], outs[1])


def test_relative_positions_depend_only_on_offset():
    table = relative_position_table(-10, 10, 48)
    assert table.shape == (21, 48)
    small = relative_position_table(-3, 5, 48)
    assert torch.allclose(table[7:16], small, atol=1e-6)
    lo, hi, index = relative_position_index(4, 8, 12, 0)  # queries at 8..11, keys 0..11
    assert (lo, hi) == (8 - 11, 11)
    assert index[0, 0].item() == 8 - lo and index[3, 11].item() == 0 - lo


@pytest.mark.parametrize("ratio", [3, 0])
def test_subsampling_lengths(ratio):
    sub = Conv2dSubsampling(80, 32, dropout=0.0, convnext_hidden_ratio=ratio).eval()
    for t in (9, 10, 50, 101):
        out, lens = sub(torch.randn(1, t, 80), torch.tensor([t]))
        assert out.shape == (1, (t - 7) // 2, 32)
        assert lens.item() == (t - 7) // 2


@pytest.mark.parametrize("ratio,channels", [(3, 128), (1, 128), (0, 128), (0, 64)])
def test_subsampling_streams_like_the_full_forward(ratio, channels):
    """Chunks of 2n + 7 frames advancing by 2n give the full forward's frames;
    without the ConvNeXt block (ratio 0) the cache keeps its 128-channel shape
    whatever the front end's width, unchanged."""
    torch.manual_seed(0)
    sub = Conv2dSubsampling(80, 32, layer3_channels=channels, dropout=0.0, convnext_hidden_ratio=ratio).eval()
    assert sub.out.in_features == channels * 19
    x = torch.randn(1, 2 * 40 + 7, 80)
    with torch.no_grad():
        full, _ = sub(x, torch.tensor([x.size(1)]))
        cache = sub.get_init_cache(1)
        assert cache.shape == (1, 128, 3, 19)
        outs = []
        for i in range(0, 80, 16):
            y, new_cache = sub.streaming_forward(x[:, i : i + 16 + 7], cache)
            assert new_cache.shape == cache.shape
            assert ratio > 0 or torch.equal(new_cache, cache)
            cache = new_cache
            outs.append(y)
    assert torch.allclose(torch.cat(outs, dim=1), full, atol=1e-5)


def test_a_front_end_width_other_than_128_needs_no_convnext_block():
    with pytest.raises(ValueError, match="128 channels"):
        Conv2dSubsampling(80, 32, layer3_channels=64, convnext_hidden_ratio=3)
    with pytest.raises(ValueError, match="128 channels"):
        ZipformerEncoder(EncoderConfig.from_name("paper", front_end_channels=64))


# ---------------------------------------------------------------------------
# configuration and parameter counts


def test_configs_and_overrides():
    assert set(ENCODER_CONFIGS) >= {"paper", "tiny"}
    cfg = EncoderConfig.from_name("tiny", causal=False, dropout=0.0)
    assert cfg.causal is False and cfg.dropout == 0.0
    assert ENCODER_CONFIGS["tiny"].causal is True  # registry untouched
    assert cfg.stack_values("query_head_dim") == (32,) * 6
    assert EncoderConfig.from_name("paper").stack_values("downsampling_factor") == (1, 2, 4, 8, 4, 2)
    with pytest.raises(KeyError):
        EncoderConfig.from_name("huge")
    with pytest.raises(ValueError):
        EncoderConfig(num_encoder_layers="2,2", encoder_dim="1,2,3").stack_values("encoder_dim")


def test_paper_config_parameter_count_and_short_forward():
    torch.manual_seed(0)
    encoder = ZipformerEncoder(EncoderConfig.from_name("paper")).eval()
    n_enc = count_parameters(encoder)
    head = estimate_transducer_parameters(encoder.output_dim)
    total = n_enc + head["decoder"] + head["joiner"]
    assert encoder.output_dim == 512
    assert 60e6 < n_enc < 70e6
    assert 65e6 <= total <= 72e6, total
    x = torch.randn(1, 7 + 2 * 32, 80)
    with torch.no_grad():
        out, lens = encoder(x, torch.tensor([x.size(1)]), chunk_size=16, left_context_frames=32)
    assert out.shape == (1, 16, 512) and lens.tolist() == [16]
    assert torch.isfinite(out).all()


def test_cli_prints_parameter_counts(capsys):
    _main(["--config", "tiny", "--set", "num_encoder_layers=1,1,1,1,1,2", "--set", "causal=false"])
    text = capsys.readouterr().out
    assert "encoder parameters:" in text and "estimated transducer total:" in text
    assert "stack 5 (x2 downsampling, 2 layers, dim 128)" in text


def test_tiny_config_size():
    n = count_parameters(_tiny())
    assert 2e6 < n < 8e6, n


# ---------------------------------------------------------------------------
# full forward


@pytest.mark.parametrize("causal", [True, False])
def test_output_shapes_and_lengths(causal):
    encoder = _tiny(causal=causal).eval()
    x = torch.randn(3, 157, 80)
    x_lens = torch.tensor([157, 120, 60])
    with torch.no_grad():
        out, out_lens = encoder(x, x_lens)
    t_out = ((157 - 7) // 2 + 1) // 2
    assert out.shape == (3, t_out, encoder.output_dim)
    assert out_lens.tolist() == [((n - 7) // 2 + 1) // 2 for n in x_lens.tolist()]
    assert torch.equal(out_lens, ZipformerEncoder.output_lengths(x_lens))
    for i, n in enumerate(out_lens.tolist()):
        assert (out[i, n:] == 0).all()  # padding frames are zeroed
        assert (out[i, :n].abs().sum(-1) > 0).all()
    if not causal:
        with pytest.raises(ValueError):
            encoder.get_init_states(1, 16, 32)


def test_padding_does_not_change_valid_outputs():
    """An utterance gives the same output alone and inside a padded batch."""
    encoder = _make_modules_matter(_tiny()).eval()
    x = torch.randn(2, 151, 80)
    with torch.no_grad():
        for chunk, left in ((16, 32), (-1, -1)):
            batch, lens = encoder(x, torch.tensor([151, 97]), chunk, left)
            alone, lens1 = encoder(x[1:, :97], torch.tensor([97]), chunk, left)
            n = lens1.item()
            assert lens[1].item() == n
            assert torch.allclose(batch[1, :n], alone[0, :n], atol=1e-4)


@pytest.mark.parametrize("chunk,left", [(16, 32), (8, 8), (32, -1)])
def test_chunked_masks_never_look_ahead(chunk, left):
    """Changing features after a chunk's window leaves all earlier outputs
    unchanged (the front end needs 2c+7 frames for the first c frames)."""
    encoder = _make_modules_matter(_tiny()).eval()
    torch.manual_seed(3)
    x = torch.randn(2, 2 * 4 * chunk + 7, 80)
    x_lens = torch.tensor([x.size(1), x.size(1)])
    with torch.no_grad():
        ref, _ = encoder(x, x_lens, chunk, left)
        for k in (1, 2, 3):
            first_future = 2 * chunk * k + 7  # first feature frame of chunk k's look-ahead
            y = x.clone()
            y[:, first_future:] += 5.0 * torch.randn_like(y[:, first_future:])
            out, _ = encoder(y, x_lens, chunk, left)
            done = chunk * k // 2  # output frames (25 Hz) of chunks < k
            assert torch.equal(out[:, :done], ref[:, :done])
            assert not torch.allclose(out[:, done:], ref[:, done:], atol=1e-3)


@pytest.mark.parametrize("chunk,left", [(16, 32), (8, 0), (32, 64), (16, 64)])
def test_windowed_attention_equals_the_masked_full_attention(chunk, left, monkeypatch):
    """The chunk-by-chunk attention gives the outputs and gradients of the
    masked T x T attention (float64, regularisers off: they take statistics
    over padding frames too, where the two forms may differ)."""
    calls = []
    key_mask = AttentionWindow.key_mask
    monkeypatch.setattr(AttentionWindow, "key_mask",
                        lambda self, *a: calls.append(self) or key_mask(self, *a))
    encoder = _make_modules_matter(_tiny(use_regularizers=False)).double()
    torch.manual_seed(5)
    x = torch.randn(3, 261, 80, dtype=torch.float64)
    x_lens = torch.tensor([261, 170, 93])  # not chunk-aligned, one shorter than a window
    weight = torch.randn(3, 64, encoder.output_dim, dtype=torch.float64)
    results = []
    for windows in (True, False):
        for stack in encoder.stacks:
            stack.attention_windows = windows
        encoder.zero_grad()
        torch.manual_seed(6)  # the same dropout masks
        out, lens = encoder.train()(x, x_lens, chunk, left)
        (out * weight[:, : out.size(1)]).sum().backward()
        grads = {n: p.grad.clone() for n, p in encoder.named_parameters() if p.grad is not None}
        results.append((out.detach(), lens, grads))
    assert len(calls) == 6 and calls[0] == AttentionWindow(chunk, left // chunk)
    (out_w, lens_w, grads_w), (out_f, lens_f, grads_f) = results
    assert torch.equal(lens_w, lens_f)
    assert torch.allclose(out_w, out_f, rtol=0, atol=1e-12)
    assert grads_w.keys() == grads_f.keys() and len(grads_w) > 50
    for name, g in grads_w.items():
        assert torch.allclose(g, grads_f[name], rtol=1e-9, atol=1e-12), name
    # the test is sensitive: a context of one chunk less changes the output
    if left > 0:
        other, _ = encoder.eval()(x, x_lens, chunk, left - chunk)
        assert (other - out_f).abs().max().item() > 1e-2


def test_windows_are_used_for_long_inputs_only():
    stack = _tiny().stacks[0]
    assert stack.attention_windows is None  # automatic
    assert stack.use_windows(32, 4, 700) and stack.use_windows(16, 4, 320)  # four windows of 160 / 80
    assert not stack.use_windows(32, 4, 639) and not stack.use_windows(16, 4, 300)
    stack.attention_windows = False
    assert not stack.use_windows(32, 4, 2000)
    stack.attention_windows = True
    assert stack.use_windows(32, 4, 161) and not stack.use_windows(32, 4, 160)


def test_attention_window_layout():
    w = AttentionWindow(chunk=3, left_chunks=1)
    x = torch.arange(1.0, 8.0).view(1, 7, 1)  # frames 1..7
    assert w.width == 6 and w.num_chunks(7) == 3
    assert w.chunks(x)[0, :, :, 0].tolist() == [[1, 2, 3], [4, 5, 6], [7, 0, 0]]
    assert w.windows(x)[0, :, :, 0].tolist() == [
        [0, 0, 0, 1, 2, 3], [1, 2, 3, 4, 5, 6], [4, 5, 6, 7, 0, 0]]
    mask = w.key_mask(torch.tensor([7, 4]), 7)
    assert mask.shape == (2, 3, 1, 6)
    assert mask[0, :, 0].tolist() == [[True] * 3 + [False] * 3, [False] * 6,
                                      [False] * 4 + [True] * 2]
    assert mask[1, 2, 0].tolist() == [False, True, True, True, True, True]
    min_off, max_off, index = w.position_index()
    assert (min_off, max_off) == (-2, 5)
    # a chunk's query a lies 3 + a - b frames after its window's key b
    assert [[v + min_off for v in row] for row in index.tolist()] == [
        [3 + a - b for b in range(6)] for a in range(3)]


def test_full_context_looks_ahead_but_chunked_does_not():
    encoder = _make_modules_matter(_tiny()).eval()
    x = torch.randn(1, 2 * 64 + 7, 80)
    lens = torch.tensor([x.size(1)])
    y = x.clone()
    y[:, 2 * 32 + 7 :] += 3.0
    with torch.no_grad():
        full_x, _ = encoder(x, lens, -1, -1)
        full_y, _ = encoder(y, lens, -1, -1)
        ch_x, _ = encoder(x, lens, 32, 32)
        ch_y, _ = encoder(y, lens, 32, 32)
    assert not torch.allclose(full_x[:, :16], full_y[:, :16], atol=1e-4)
    assert torch.equal(ch_x[:, :16], ch_y[:, :16])


# ---------------------------------------------------------------------------
# streaming


@pytest.mark.parametrize("chunk,left", [(16, 32), (8, 16), (32, 64), (16, 0)])
def test_streaming_matches_masked_full_forward(chunk, left):
    encoder = _make_modules_matter(_tiny()).eval()
    torch.manual_seed(4)
    x = torch.randn(2, 213, 80)
    x_lens = torch.tensor([213, 139])  # different lengths, not chunk-aligned
    with torch.no_grad():
        full, full_lens = encoder(x, x_lens, chunk, left)
        stream, stream_lens = _stream(encoder, x, x_lens, chunk, left)
        other, _ = encoder(x, x_lens, -1, -1)
    assert torch.equal(stream_lens, full_lens)
    t = full.size(1)
    assert stream.size(1) >= t and (stream[:, t:] == 0).all()
    err = (stream[:, :t] - full).abs().max().item()
    assert err < 1e-4, err
    # the test is sensitive: another context setting differs far more
    assert (other - full).abs().max().item() > 1e-2


def test_streaming_without_lengths_and_batch_one():
    encoder = _make_modules_matter(_tiny()).eval()
    x = torch.randn(1, 2 * 16 * 3 + 7, 80)
    with torch.no_grad():
        full, _ = encoder(x, torch.tensor([x.size(1)]), 16, 32)
        states = encoder.get_init_states(1, 16, 32)
        outs = []
        for k in range(3):
            window = x[:, 32 * k : 32 * k + 39]
            out, out_lens, states = encoder.streaming_forward(window, None, states)
            assert out_lens.tolist() == [8]
            outs.append(out)
    assert torch.allclose(torch.cat(outs, 1), full, atol=1e-4)
    assert states[-2].tolist() == [48] and states[-1].tolist() == [48]


def test_init_state_shapes():
    encoder = _tiny()
    states = encoder.get_init_states(3, 16, 64)
    n_layers = sum(len(s.layers) for s in encoder.stacks)
    assert len(states) == 6 * n_layers + 3
    # first layer of stack 0 (rate 1): 64 cached frames; stack 3 (rate 8): 8
    assert states[0].shape == (3, 64, 4 * 32)
    assert states[3 * 6].shape == (3, 8, 4 * 32)
    assert states[4].shape == (3, 128, 15)  # (31 - 1) // 2 causal history
    assert states[-3].shape == (3, 128, 3, 19)
    assert states[-1].dtype == torch.int64
    with pytest.raises(ValueError):
        encoder.get_init_states(1, 12, 24)  # not a multiple of 8
    with pytest.raises(ValueError):
        encoder.get_init_states(1, 16, 24)  # left context not a multiple of chunk


def test_streaming_forward_exports_to_onnx(tmp_path):
    """streaming_forward traces without value-dependent control flow: the
    exported graph, run by onnxruntime chunk after chunk with its own
    states, reproduces the masked full forward."""
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    import warnings

    encoder = _make_modules_matter(_tiny()).eval()
    chunk, left = 16, 32
    names = encoder.get_state_names()
    states = encoder.get_init_states(2, chunk, left)
    assert len(names) == len(states)

    class Wrapper(torch.nn.Module):
        def __init__(self, enc: ZipformerEncoder) -> None:
            super().__init__()
            self.enc = enc

        def forward(self, x, x_lens, *states):
            out, out_lens, new_states = self.enc.streaming_forward(x, x_lens, list(states))
            return (out, out_lens, *new_states)

    wrapper = Wrapper(encoder).eval()
    need = encoder.chunk_feature_frames(chunk)
    path = str(tmp_path / "encoder_chunk.onnx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            wrapper,
            (torch.zeros(2, need, 80), torch.tensor([need, need]), *states),
            path,
            input_names=["x", "x_lens", *names],
            output_names=["out", "out_lens", *[n + "_out" for n in names]],
            opset_version=17,
            dynamo=False,
        )
    onnx.checker.check_model(onnx.load(path))
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])

    torch.manual_seed(11)
    x = torch.randn(2, 2 * chunk * 4 + 7, 80)
    x_lens = torch.tensor([x.size(1), 90])
    with torch.no_grad():
        full, full_lens = encoder(x, x_lens, chunk, left)
    feeds_states = [s.numpy() for s in states]
    outs, total = [], torch.zeros(2, dtype=torch.int64)
    for k in range(4):
        start = k * encoder.chunk_shift_frames(chunk)
        window = x[:, start : start + need]
        window_lens = torch.clamp(x_lens - start, 0, need)
        result = session.run(
            None,
            {"x": window.numpy(), "x_lens": window_lens.numpy(),
             **dict(zip(names, feeds_states))},
        )
        outs.append(torch.from_numpy(result[0]))
        total += torch.from_numpy(result[1])
        feeds_states = result[2:]
    stream = torch.cat(outs, dim=1)
    assert torch.equal(total, full_lens)
    assert (stream - full).abs().max().item() < 1e-4


# ---------------------------------------------------------------------------
# training behaviour


def test_gradient_reaches_every_parameter():
    encoder = _tiny(seed=5).train()
    x = torch.randn(2, 135, 80)
    x_lens = torch.tensor([135, 101])
    torch.manual_seed(6)
    out, out_lens = encoder(x, x_lens)
    loss = (out * torch.randn_like(out)).sum()
    loss.backward()
    missing = [
        name
        for name, p in encoder.named_parameters()
        if p.grad is None or not torch.isfinite(p.grad).all() or p.grad.abs().sum() == 0
    ]
    assert not missing, missing


def test_determinism_with_seed():
    def run(seed: int):
        encoder = _tiny(seed=seed).train()
        torch.manual_seed(seed + 100)
        x = torch.randn(2, 101, 80)
        outs, configs = [], []
        for _ in range(3):
            out, _ = encoder(x, torch.tensor([101, 80]))
            outs.append(out.detach())
            configs.append(encoder.last_chunk_config)
        return outs, configs

    a_out, a_cfg = run(7)
    b_out, b_cfg = run(7)
    assert a_cfg == b_cfg
    for a, b in zip(a_out, b_out):
        assert torch.equal(a, b)
    c_out, _ = run(8)
    assert not torch.equal(a_out[0], c_out[0])


def test_random_chunk_draws_cover_the_lists():
    encoder = _tiny()
    torch.manual_seed(0)
    draws = {encoder.draw_chunk_config() for _ in range(400)}
    chunks = {c for c, _ in draws}
    lefts = {left for _, left in draws}
    assert chunks == {16, 32, 64, -1}
    assert lefts == {64, 128, 256, -1}
    # in training mode forward draws (and records) a configuration
    encoder.train()
    seen = set()
    x = torch.randn(1, 39, 80)
    for _ in range(12):
        encoder(x, torch.tensor([39]))
        seen.add(encoder.last_chunk_config[0])
    assert len(seen) >= 2
    encoder.eval()
    encoder(x, torch.tensor([39]))
    assert encoder.last_chunk_config == (-1, -1)  # eval default: full context


def test_bad_chunk_arguments():
    encoder = _tiny().eval()
    x = torch.randn(1, 39, 80)
    with pytest.raises(ValueError):
        encoder(x, torch.tensor([39]), chunk_size=12, left_context_frames=24)
    non_causal = _tiny(causal=False).eval()
    with pytest.raises(ValueError):
        non_causal(x, torch.tensor([39]), chunk_size=16, left_context_frames=32)
