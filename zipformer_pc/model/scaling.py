"""Building blocks shared by the Zipformer encoder.

This module holds the small, generic pieces the Zipformer paper (Yao et al.,
ICLR 2024) introduces or relies on:

* :class:`BiasNorm` -- the LayerNorm replacement of the paper: the input is
  divided by the root-mean-square of ``x - bias`` (the bias only enters the
  normaliser, so the length information of ``x`` is kept) and multiplied by a
  learned scalar ``exp(log_scale)``.
* :class:`SwooshR` and :class:`SwooshL` -- the two activations of the paper,
  ``log(1 + exp(x - 1)) - 0.08 x - 0.313261687`` and
  ``log(1 + exp(x - 4)) - 0.08 x - 0.035``, written with :func:`softplus` so
  they do not overflow for large inputs.
* :func:`scaled_linear` -- an ``nn.Linear`` whose default initialisation is
  multiplied by a factor, used for the output projections of residual
  modules so that a freshly initialised network is close to the identity.
* :func:`convert_num_channels` -- truncation / zero-padding of the channel
  dimension between encoder stacks of different widths.
* :class:`Balancer` and :class:`Whiten` -- gradient-only regularisers in the
  spirit of the paper's training aids: identity in the forward pass, they
  add a small term to the gradient that keeps per-channel statistics
  (sign balance, magnitude) in range and discourages highly anisotropic
  (non-white) activations.  They do nothing in eval mode.  Like icefall's,
  each one acts on a random share of the training steps (the balancer on
  half, the whitener on 2.5% while its activations are white enough and on
  25% once they were not): computing the statistics on every step cost ~8%
  of a tiny model's CPU training step.
* :class:`SharedDropout` -- dropout whose mask is drawn once per utterance and
  channel and shared by all frames.  Drawing one random number per element
  cost ~9% of a tiny model's CPU training step (``bernoulli_`` is slow on a
  CPU); icefall shares its feed-forward dropout masks over time the same way.

Apart from the two regularisers (custom autograd functions used only in
training mode) everything is plain PyTorch, so eval-mode models trace and
export to ONNX without special handling.
"""

from __future__ import annotations

import math
import random
from typing import Dict, Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

__all__ = [
    "BiasNorm",
    "SwooshL",
    "SwooshR",
    "softplus",
    "swoosh_l",
    "swoosh_r",
    "scaled_linear",
    "convert_num_channels",
    "Balancer",
    "SharedDropout",
    "Whiten",
    "whitening_metric",
    "whiten_state",
    "load_whiten_state",
]

# Offsets that make SwooshR(0) == 0 and SwooshL(0) ~= 0 (as in the paper).
_SWOOSH_R_OFFSET = 0.313261687
_SWOOSH_L_OFFSET = 0.035


def softplus(z: Tensor) -> Tensor:
    """``F.softplus(z)``: ``log(1 + exp(z))``, and ``z`` itself above 20 (10 in fp16/bf16).

    Written with ``exp`` and ``log`` because ``F.softplus`` goes through
    ``log1p``, which the CPU builds of torch do not vectorise: ~8x slower on
    the front end's (N, 128, T, 19) maps, where softplus took ~12% of the
    tiny model's training step.  ``1 + exp(z)`` rounds away ``exp(z)`` below half
    an ulp of 1, an absolute error below 6e-8 (float32) next to Swoosh's
    ``-0.08 x - offset``; elsewhere the values equal ``F.softplus``'s to a
    few ulps (tested).  ONNX export keeps the one ``Softplus`` operator.
    """
    if torch.jit.is_tracing():
        return F.softplus(z)
    # exp must not overflow in z's own dtype: an in-place exp_ stays fp16 under
    # autocast, where exp(z) is inf above ~11.1; softplus(z) - z = log(1 + exp(-z))
    # is below 5e-5 at 10, far under half an fp16/bf16 ulp of 10
    limit = 20.0 if z.dtype in (torch.float32, torch.float64) else 10.0
    return torch.where(z > limit, z, z.clamp(max=limit).exp_().add_(1.0).log_())


class _SwooshFunction(torch.autograd.Function):
    """``softplus(x - shift) - 0.08 x - offset`` with a lean backward pass.

    Autograd on the plain expression keeps four intermediate tensors of the
    input's size and runs five elementwise kernels backwards; this keeps only
    ``x`` and computes the derivative ``sigmoid(x - shift) - 0.08`` in two
    kernels.  The front end's ConvNeXt applies it to (N, 384, T, 19) maps, the
    largest activations of a small model, so this is a measurable part of a
    CPU training step.  Values and gradients equal the plain expression's
    (tested).
    """

    @staticmethod
    def forward(ctx, x: Tensor, shift: float, offset: float) -> Tensor:
        ctx.save_for_backward(x)
        ctx.shift = shift
        return softplus(x - shift).sub_(x, alpha=0.08).sub_(offset)

    @staticmethod
    def backward(ctx, grad: Tensor):
        (x,) = ctx.saved_tensors
        return grad * torch.sigmoid(x - ctx.shift).sub_(0.08), None, None


def _swoosh(x: Tensor, shift: float, offset: float) -> Tensor:
    if torch.is_grad_enabled() and x.requires_grad and not torch.jit.is_tracing():
        return _SwooshFunction.apply(x, shift, offset)
    return softplus(x - shift) - 0.08 * x - offset


def swoosh_r(x: Tensor) -> Tensor:
    """SwooshR(x) = log(1 + exp(x - 1)) - 0.08 x - 0.313261687, elementwise.

    :func:`softplus` switches to the identity for large arguments, so the
    function is finite for every finite input (no ``exp`` overflow).
    """
    return _swoosh(x, 1.0, _SWOOSH_R_OFFSET)


def swoosh_l(x: Tensor) -> Tensor:
    """SwooshL(x) = log(1 + exp(x - 4)) - 0.08 x - 0.035, elementwise."""
    return _swoosh(x, 4.0, _SWOOSH_L_OFFSET)


class SwooshR(nn.Module):
    """SwooshR activation (used in the convolution front end and conv modules).

    Shape: any; output has the same shape as the input.
    """

    def forward(self, x: Tensor) -> Tensor:
        return swoosh_r(x)


class SwooshL(nn.Module):
    """SwooshL activation (used inside the feed-forward modules).

    Shape: any; output has the same shape as the input.
    """

    def forward(self, x: Tensor) -> Tensor:
        return swoosh_l(x)


class BiasNorm(nn.Module):
    """Bias normalisation: ``x / RMS(x - b) * exp(g)``.

    Compared with LayerNorm there is no mean subtraction from the output and
    a single learned scalar gain; the learned per-channel ``bias`` ``b`` only
    enters the normaliser, which lets the module keep information about the
    vector length instead of removing it.

    Args:
      num_channels: size of the normalised dimension.
      channel_dim: which dimension holds the channels (default last).
      eps: added to the mean square for numerical safety (so an all-zero
        frame with a zero bias maps to zero instead of NaN).
    """

    def __init__(self, num_channels: int, channel_dim: int = -1, eps: float = 1e-8) -> None:
        super().__init__()
        self.num_channels = num_channels
        self.channel_dim = channel_dim
        self.eps = eps
        # small random rather than zero: ScaledAdam's steps are relative to a
        # tensor's RMS, so an all-zero tensor would barely move
        self.bias = nn.Parameter(0.02 * torch.randn(num_channels))
        self.log_scale = nn.Parameter(torch.tensor(0.0))

    def forward(self, x: Tensor) -> Tensor:
        """
        Args:
          x: tensor with ``num_channels`` along ``channel_dim``, e.g. (N, T, C).
        Returns:
          tensor of the same shape.
        """
        channel_dim = self.channel_dim % x.ndim
        shape = [1] * x.ndim
        shape[channel_dim] = self.num_channels
        bias = self.bias.reshape(shape)
        mean_sq = ((x - bias) ** 2).mean(dim=channel_dim, keepdim=True)
        return x * torch.rsqrt(mean_sq + self.eps) * self.log_scale.exp()

    def extra_repr(self) -> str:
        return f"num_channels={self.num_channels}, channel_dim={self.channel_dim}"


def scaled_linear(
    in_features: int,
    out_features: int,
    bias: bool = True,
    initial_scale: float = 1.0,
) -> nn.Linear:
    """An ``nn.Linear`` whose default (Kaiming-uniform) init is scaled.

    A small ``initial_scale`` (e.g. 0.25) on the last projection of a
    residual module makes its initial contribution small, so deep stacks
    start close to the identity map and train stably with ScaledAdam (which
    updates each tensor relative to its own scale).

    Args:
      in_features, out_features, bias: as for ``nn.Linear``.
      initial_scale: factor applied to the initial weight and bias.
    """
    linear = nn.Linear(in_features, out_features, bias=bias)
    with torch.no_grad():
        linear.weight.mul_(initial_scale)
        if linear.bias is not None:
            # A small random bias (rather than zero) keeps the bias tensor's
            # scale meaningful for ScaledAdam's relative updates.
            bound = 0.1 * initial_scale / math.sqrt(in_features)
            linear.bias.uniform_(-bound, bound)
    return linear


def convert_num_channels(x: Tensor, num_channels: int) -> Tensor:
    """Truncate or zero-pad the last dimension of ``x`` to ``num_channels``.

    Used between Zipformer stacks that have different widths.

    Args:
      x: (..., C)
    Returns:
      (..., num_channels)
    """
    cur = x.size(-1)
    if num_channels <= cur:
        return x[..., :num_channels]
    pad = torch.zeros(*x.shape[:-1], num_channels - cur, dtype=x.dtype, device=x.device)
    return torch.cat((x, pad), dim=-1)


# ---------------------------------------------------------------------------
# gradient-only regularisers
#
# Both modules below are the identity in the forward pass; in training they
# add a small term to the gradient that flows back through them.  They are
# skipped entirely in eval mode (and under tracing / ONNX export), so they
# never change what the model computes.


def _reduce_dims(x: Tensor, channel_dim: int) -> Tuple[int, ...]:
    channel_dim = channel_dim % x.ndim
    return tuple(d for d in range(x.ndim) if d != channel_dim)


class _BalancerFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: Tensor, channel_dim: int, limits: Tuple[float, float, float, float],
                grad_scale: float) -> Tensor:
        ctx.save_for_backward(x)
        ctx.channel_dim = channel_dim
        ctx.limits = limits
        ctx.grad_scale = grad_scale
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad: Tensor):
        (x,) = ctx.saved_tensors
        min_positive, max_positive, min_abs, max_abs = ctx.limits
        dims = _reduce_dims(x, ctx.channel_dim)
        with torch.no_grad():
            xf = x.float()
            positive = (xf > 0).float().mean(dim=dims, keepdim=True)
            mean_abs = xf.abs().mean(dim=dims, keepdim=True)
            # +1 where the channel's values should grow (resp. its magnitudes)
            push = (positive < min_positive).float() - (positive > max_positive).float()
            push_abs = (mean_abs < min_abs).float() - (mean_abs > max_abs).float()
            direction = push + push_abs * xf.sign()
            scale = ctx.grad_scale * grad.float().abs().mean(dim=dims, keepdim=True)
            # gradient descent moves x against the gradient, i.e. along +direction
            new_grad = (grad.float() - scale * direction).to(grad.dtype)
        return new_grad, None, None, None


class Balancer(nn.Module):
    """Keeps per-channel activation statistics within limits via the gradient.

    For each channel, if the proportion of positive values is outside
    ``[min_positive, max_positive]`` or the mean absolute value outside
    ``[min_abs, max_abs]``, a term proportional to ``grad_scale`` times the
    channel's mean absolute gradient is added to the gradient, pushing the
    activations back.  Identity in the forward pass and in eval mode.

    Args:
      num_channels: size of ``channel_dim`` (for checking only).
      channel_dim: the channel dimension.
      min_positive, max_positive, min_abs, max_abs: the limits.
      grad_scale: strength relative to the incoming gradient.
      prob: share of the training calls that act (drawn with Python's
        ``random``, so the torch random stream of dropout is untouched).
    """

    def __init__(
        self,
        num_channels: int,
        channel_dim: int = -1,
        min_positive: float = 0.05,
        max_positive: float = 0.95,
        min_abs: float = 0.2,
        max_abs: float = 100.0,
        grad_scale: float = 0.04,
        prob: float = 0.5,
    ) -> None:
        super().__init__()
        if not 0.0 <= prob <= 1.0:
            raise ValueError(f"prob must be in [0, 1], got {prob}")
        self.num_channels = num_channels
        self.channel_dim = channel_dim
        self.limits = (min_positive, max_positive, min_abs, max_abs)
        self.grad_scale = grad_scale
        self.prob = prob

    def forward(self, x: Tensor) -> Tensor:
        """Any shape with ``num_channels`` at ``channel_dim``; returns ``x``."""
        if not self.training or not x.requires_grad or torch.jit.is_tracing():
            return x
        assert x.size(self.channel_dim) == self.num_channels
        if random.random() >= self.prob:
            return x
        return _BalancerFunction.apply(x, self.channel_dim, self.limits, self.grad_scale)


def whitening_metric(x: Tensor, num_groups: int = 1) -> Tensor:
    """How far the covariance of ``x``'s channels is from a multiple of the
    identity: ``c * tr(C^2) / tr(C)^2`` averaged over ``num_groups`` channel
    groups of size ``c``; 1 for white features, up to ``c`` for rank one.

    Args:
      x: (..., C) with C divisible by ``num_groups``.
    """
    c_total = x.size(-1)
    c = c_total // num_groups
    x = x.reshape(-1, num_groups, c).transpose(0, 1).float()  # (G, F, c)
    x = x - x.mean(dim=1, keepdim=True)
    cov = torch.matmul(x.transpose(1, 2), x) / x.size(1)  # (G, c, c)
    trace = cov.diagonal(dim1=1, dim2=2).sum(-1)
    return (c * (cov ** 2).sum(dim=(1, 2)) / (trace ** 2 + 1e-20)).mean()


class _WhitenFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: Tensor, module: "Whiten") -> Tensor:
        ctx.save_for_backward(x)
        ctx.module = module
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad: Tensor):
        (x,) = ctx.saved_tensors
        module = ctx.module
        with torch.enable_grad():
            x_detached = x.detach().requires_grad_(True)
            metric = whitening_metric(x_detached, module.num_groups)
            exceeded = metric.item() > module.whitening_limit
            module.exceeded = exceeded
            if not exceeded:
                return grad, None
            (penalty,) = torch.autograd.grad(metric, x_detached)
        with torch.no_grad():
            scale = module.grad_scale * grad.float().norm() / (penalty.float().norm() + 1e-20)
            new_grad = (grad.float() + scale * penalty.float()).to(grad.dtype)
        return new_grad, None


class Whiten(nn.Module):
    """Discourages very anisotropic activations via the gradient.

    When :func:`whitening_metric` of the input exceeds ``whitening_limit``,
    the gradient of the metric, scaled to ``grad_scale`` times the norm of the
    incoming gradient, is added to it.  Identity in the forward pass and in
    eval mode.

    Args:
      num_groups: channel groups whose covariances are measured separately.
      whitening_limit: metric value below which nothing happens.
      grad_scale: strength relative to the incoming gradient.
      prob: (low, high) share of the training calls that act: ``high`` until
        a measured metric is within the limit and again after one that is
        not, ``low`` meanwhile (drawn with Python's ``random``).
    """

    def __init__(self, num_groups: int = 1, whitening_limit: float = 5.0, grad_scale: float = 0.01,
                 prob: Tuple[float, float] = (0.025, 0.25)) -> None:
        super().__init__()
        low, high = prob
        if not 0.0 <= low <= high <= 1.0:
            raise ValueError(f"prob must be (low, high) with 0 <= low <= high <= 1, got {prob}")
        self.num_groups = num_groups
        self.whitening_limit = whitening_limit
        self.grad_scale = grad_scale
        self.prob = (low, high)
        #: whether the last measured metric exceeded the limit (None: not measured yet)
        self.exceeded: Optional[bool] = None

    def forward(self, x: Tensor) -> Tensor:
        """(..., C) -> the same tensor."""
        if not self.training or not x.requires_grad or torch.jit.is_tracing():
            return x
        low, high = self.prob
        if random.random() >= (low if self.exceeded is False else high):
            return x
        return _WhitenFunction.apply(x, self)


def whiten_state(model: nn.Module) -> Dict[str, Optional[bool]]:
    """What each :class:`Whiten` of ``model`` last measured (its ``exceeded``), by
    module name.  Checkpoints keep it so that a resumed run draws its
    whitening steps as the uninterrupted run would."""
    return {name: m.exceeded for name, m in model.named_modules() if isinstance(m, Whiten)}


def load_whiten_state(model: nn.Module, state: Dict[str, Optional[bool]]) -> None:
    """Restore :func:`whiten_state` (modules it does not name start unmeasured)."""
    for name, m in model.named_modules():
        if isinstance(m, Whiten):
            m.exceeded = state.get(name)


class SharedDropout(nn.Module):
    """Dropout with one mask per utterance and channel, shared along ``dim``.

    ``nn.Dropout`` draws a random number for every element; on a CPU that
    ``bernoulli_`` took ~9% of the tiny model's training step (eight
    residual dropouts per layer on (N, T, C) activations).  Sharing the mask
    over the time axis draws N x C numbers instead of N x T x C and drops a
    channel for a whole utterance, as icefall's feed-forward dropout does.
    Kept values are scaled by ``1 / (1 - p)``; identity in eval mode.

    Args:
      p: probability of dropping a channel.
      dim: the dimension the mask is shared along (1: time of (N, T, C)).
    """

    def __init__(self, p: float = 0.1, dim: int = 1) -> None:
        super().__init__()
        if not 0.0 <= p < 1.0:
            raise ValueError(f"dropout probability must be in [0, 1), got {p}")
        self.p = p
        self.dim = dim

    def forward(self, x: Tensor) -> Tensor:
        if not self.training or self.p == 0.0:
            return x
        shape = list(x.shape)
        shape[self.dim] = 1
        mask = torch.empty(shape, dtype=x.dtype, device=x.device).bernoulli_(1.0 - self.p)
        return x * mask.div_(1.0 - self.p)

    def extra_repr(self) -> str:
        return f"p={self.p}, dim={self.dim}"
