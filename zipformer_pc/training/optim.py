"""ScaledAdam optimizer and Eden learning-rate schedule (Zipformer paper, Sec. 4).

ScaledAdam
    Adam whose step for every non-scalar tensor is proportional to the
    tensor's current root-mean-square value (so a learning rate means "the
    same relative change" for every tensor, whatever its scale), plus an
    explicitly learned scale: writing a tensor as ``theta = r * theta'`` with
    ``r = RMS(theta)``, the gradient with respect to ``r`` is
    ``h = sum(g * theta')`` and ``r`` gets its own Adam-normalised update with
    the learning rate multiplied by ``scalar_lr_scale`` (the paper's eta).
    Per step, for a tensor with gradient ``g``::

        m, v  <- Adam moments of g            (betas[0], betas[1])
        n, w  <- Adam moments of h = <g, theta'>
        delta  = -lr * r * m_hat / (sqrt(v_hat) + eps)
        delta_r = -eta * lr * r * n_hat / (sqrt(w_hat) + eps)
        theta <- theta + delta + delta_r * theta'

    ``r`` is kept within ``[param_min_rms, param_max_rms]`` (the scale update
    may not push it further out).  Scalar tensors get a plain Adam step with
    learning rate ``eta * lr`` and are clamped to ``[-scalar_max, scalar_max]``.

    Gradient clipping: before each step the "update-relevant" gradient norm
    ``sqrt(sum_p (r_p * |g_p|)^2)`` (r = 1 for scalars) is compared with
    ``clipping_scale`` times the median of the norms of the last
    ``clipping_update_period`` steps; if larger, all gradients are scaled
    down to that threshold.

Eden
    ``lr = base_lr * ((b^2 + B^2) / B^2)^-0.25 * ((e^2 + E^2) / E^2)^-0.25 * warmup(b)``
    with ``b`` the batch count, ``e`` the epoch count, ``B = lr_batches``,
    ``E = lr_epochs``, and a linear warm-up from ``warmup_start`` to 1 over
    ``warmup_batches`` batches.  Call :meth:`Eden.step_batch` after every
    optimizer step and :meth:`Eden.step_epoch` at the start of every epoch
    with the number of completed epochs.

Both classes have ``state_dict`` / ``load_state_dict`` so training resumes
with exactly the same subsequent updates.  :func:`make_optimizer` builds
either ScaledAdam or AdamW.
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, List, Optional, Tuple

import torch
from torch import Tensor
from torch.optim import Optimizer

__all__ = ["ScaledAdam", "LRScheduler", "Eden", "make_optimizer"]


def _host_scalars(device: torch.device) -> bool:
    """Whether the update's per-tensor factors go through Python floats (on the
    CPU, where that is cheapest) or stay device tensors (elsewhere: a ``.tolist()``
    of CUDA tensors waits for the GPU twice a step)."""
    return device.type == "cpu"


class ScaledAdam(Optimizer):
    """Parameter-scale-relative Adam with learned scales and median-based
    gradient clipping.

    Args:
      params: parameters or parameter groups.
      lr: base learning rate (the paper uses 0.045).
      clipping_scale: clip when the gradient norm exceeds this multiple of
        the median recent norm (``None`` disables clipping).
      betas: Adam coefficients for the first and second moments.
      scalar_lr_scale: eta, the learning-rate factor of scale updates and of
        scalar parameters.
      eps: added to the square root of the second moment.
      param_min_rms, param_max_rms: limits of the learned RMS of a tensor.
      scalar_max: scalar parameters are clamped to ``[-scalar_max, scalar_max]``.
      clipping_update_period: number of recent steps whose median norm sets
        the clipping threshold.
    """

    def __init__(
        self,
        params: Iterable,
        lr: float = 0.045,
        clipping_scale: Optional[float] = 2.0,
        betas: Tuple[float, float] = (0.9, 0.98),
        scalar_lr_scale: float = 0.1,
        eps: float = 1.0e-8,
        param_min_rms: float = 1.0e-5,
        param_max_rms: float = 3.0,
        scalar_max: float = 10.0,
        clipping_update_period: int = 100,
    ) -> None:
        if lr <= 0:
            raise ValueError(f"invalid learning rate {lr}")
        if not (0.0 <= betas[0] < 1.0 and 0.0 <= betas[1] < 1.0):
            raise ValueError(f"invalid betas {betas}")
        defaults = dict(
            lr=lr,
            betas=betas,
            scalar_lr_scale=scalar_lr_scale,
            eps=eps,
            param_min_rms=param_min_rms,
            param_max_rms=param_max_rms,
            scalar_max=scalar_max,
        )
        super().__init__(params, defaults)
        self.clipping_scale = clipping_scale
        self.clipping_update_period = clipping_update_period
        #: gradient norms of recent steps (before clipping)
        self.norm_history: List[float] = []
        #: how many steps were clipped so far
        self.num_clipped = 0
        #: the scaling factor applied to the gradients at the last step (1 = none)
        self.last_clip_factor = 1.0

    # -- clipping ---------------------------------------------------------

    def _clip_factor(self, terms: List[Tensor]) -> float:
        """From the squared "update-relevant" gradient norms of the groups,
        update the history and return the factor (<= 1) by which gradients
        are scaled this step."""
        if not terms:
            return 1.0
        norm = float(torch.stack(terms).sum().sqrt())
        factor = 1.0
        if self.clipping_scale is not None and self.norm_history:
            median = float(torch.tensor(self.norm_history).median())
            threshold = self.clipping_scale * median
            if norm > threshold > 0:
                factor = threshold / norm
                self.num_clipped += 1
        if norm == norm and norm != float("inf"):  # keep NaN/inf out of the history
            self.norm_history.append(norm)
            if len(self.norm_history) > self.clipping_update_period:
                self.norm_history = self.norm_history[-self.clipping_update_period :]
        return factor

    # -- the update ---------------------------------------------------------
    #
    # The update runs on all tensors of a group at once (torch._foreach_*
    # kernels, per-tensor scalars stacked into vectors): a loop of ~20 small
    # operations per tensor took ~9% of the tiny model's CPU training step
    # (some 400 tensors), most of it Python and dispatch overhead.

    @staticmethod
    def _norms(tensors: List[Tensor]) -> Tensor:
        """The L2 norm of each tensor, as one float32 vector."""
        return torch.stack([n.float() for n in torch._foreach_norm(tensors)])

    def _split(self, group: Dict[str, Any]) -> Tuple[List[Tensor], List[Tensor], Tensor]:
        """The group's non-scalar and scalar parameters that have gradients,
        and the RMS of each non-scalar one (at least ``param_min_rms``)."""
        tensors: List[Tensor] = []
        scalars: List[Tensor] = []
        for p in group["params"]:
            if p.grad is None:
                continue
            if p.grad.is_sparse:
                raise RuntimeError("ScaledAdam does not support sparse gradients")
            (tensors if p.numel() > 1 else scalars).append(p)
        rms = torch.empty(0)
        if tensors:
            # on the parameters' device: a CPU vector divided into CUDA norms raises
            sqrt_numel = torch.tensor([p.numel() for p in tensors], dtype=torch.float32,
                                      device=tensors[0].device).sqrt()
            rms = (self._norms(tensors) / sqrt_numel).clamp(min=group["param_min_rms"])
        return tensors, scalars, rms

    def _adam_moments(self, group: Dict[str, Any], params: List[Tensor], factor: float, scale_state: bool
                      ) -> Tuple[List[Tensor], List[Tensor], List[Tensor], List[float], List[float]]:
        """Advance the Adam moments of ``params`` with their gradients times the
        clipping ``factor``; returns those gradients, the first moments,
        ``sqrt(v_hat) + eps`` and the bias corrections ``1 - beta^t``."""
        beta1, beta2 = group["betas"]
        grads = [p.grad for p in params]
        if factor != 1.0:
            grads = torch._foreach_mul(grads, factor)
        ms, vs, bias1, bias2 = [], [], [], []
        for p in params:
            state = self.state[p]
            if len(state) == 0:
                state["step"] = 0
                state["exp_avg"] = torch.zeros_like(p)
                state["exp_avg_sq"] = torch.zeros_like(p)
                if scale_state:
                    state["scale_exp_avg"] = torch.zeros((), dtype=p.dtype, device=p.device)
                    state["scale_exp_avg_sq"] = torch.zeros((), dtype=p.dtype, device=p.device)
            state["step"] += 1
            ms.append(state["exp_avg"])
            vs.append(state["exp_avg_sq"])
            bias1.append(1.0 - beta1 ** state["step"])
            bias2.append(1.0 - beta2 ** state["step"])
        torch._foreach_mul_(ms, beta1)
        torch._foreach_add_(ms, grads, alpha=1.0 - beta1)
        torch._foreach_mul_(vs, beta2)
        torch._foreach_addcmul_(vs, grads, grads, value=1.0 - beta2)
        # Adam direction m_hat / (sqrt(v_hat) + eps), without the 1/bias1
        # factor (folded into the step size)
        denoms = torch._foreach_div(vs, bias2)
        torch._foreach_sqrt_(denoms)
        torch._foreach_add_(denoms, group["eps"])
        return grads, ms, denoms, bias1, bias2

    @torch.no_grad()
    def step(self, closure=None):
        """Perform one optimisation step; returns the closure's loss if given."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        split = [self._split(group) for group in self.param_groups]
        terms: List[Tensor] = []
        for tensors, scalars, rms in split:
            if tensors:
                terms.append((self._norms([p.grad for p in tensors]) * rms).square().sum())
            if scalars:
                terms.append(self._norms([p.grad for p in scalars]).square().sum())
        factor = self._clip_factor(terms)
        self.last_clip_factor = factor
        for group, (tensors, scalars, rms) in zip(self.param_groups, split):
            lr, eta = group["lr"], group["scalar_lr_scale"]
            beta1, beta2 = group["betas"]
            if scalars:
                _, ms, denoms, bias1, _ = self._adam_moments(group, scalars, factor, scale_state=False)
                torch._foreach_addcdiv_(scalars, ms, denoms, [-lr * eta / b for b in bias1])
                torch._foreach_clamp_min_(scalars, -group["scalar_max"])
                torch._foreach_clamp_max_(scalars, group["scalar_max"])
            if not tensors:
                continue
            grads, ms, denoms, bias1, bias2 = self._adam_moments(group, tensors, factor, scale_state=True)
            # gradient w.r.t. the scale r of p = r * p', p' = p / r
            h = torch.stack([torch.dot(g.reshape(-1), p.reshape(-1)).float() for g, p in zip(grads, tensors)]) / rms
            n_state = [self.state[p]["scale_exp_avg"] for p in tensors]
            w_state = [self.state[p]["scale_exp_avg_sq"] for p in tensors]
            n = torch.stack(n_state).float() * beta1 + h * (1.0 - beta1)
            w = torch.stack(w_state).float() * beta2 + h * h * (1.0 - beta2)
            torch._foreach_copy_(n_state, list(n.unbind(0)))
            torch._foreach_copy_(w_state, list(w.unbind(0)))
            b1 = torch.tensor(bias1, dtype=torch.float32, device=rms.device)
            b2 = torch.tensor(bias2, dtype=torch.float32, device=rms.device)
            delta_r = -eta * lr * rms * (n / b1) / ((w / b2).sqrt() + group["eps"])
            # keep the RMS within [param_min_rms, param_max_rms]
            delta_r = torch.where(rms >= group["param_max_rms"], delta_r.clamp(max=0.0), delta_r)
            delta_r = torch.where(rms <= group["param_min_rms"], delta_r.clamp(min=0.0), delta_r)
            # theta <- theta + delta_r * theta' + delta  (theta' = theta / r)
            scale, step_size = 1.0 + delta_r / rms, -lr * rms / b1
            if _host_scalars(rms.device):
                # CPU: per-tensor Python scalars make the cheapest kernels
                torch._foreach_mul_(tensors, scale.tolist())
                torch._foreach_addcdiv_(tensors, ms, denoms, step_size.tolist())
            else:
                # an accelerator: the per-tensor factors stay on the device (no host sync)
                torch._foreach_mul_(tensors, list(scale.unbind(0)))
                updates = torch._foreach_div(ms, denoms)
                torch._foreach_mul_(updates, list(step_size.unbind(0)))
                torch._foreach_add_(tensors, updates)
        return loss

    # -- checkpointing ------------------------------------------------------

    def state_dict(self) -> Dict[str, Any]:
        sd = super().state_dict()
        sd["clipping"] = {
            "norm_history": list(self.norm_history),
            "num_clipped": self.num_clipped,
            "clipping_scale": self.clipping_scale,
            "clipping_update_period": self.clipping_update_period,
        }
        return sd

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        state_dict = dict(state_dict)
        clipping = state_dict.pop("clipping", None)
        super().load_state_dict(state_dict)
        if clipping is not None:
            self.norm_history = list(clipping["norm_history"])
            self.num_clipped = int(clipping["num_clipped"])
            self.clipping_scale = clipping["clipping_scale"]
            self.clipping_update_period = int(clipping["clipping_update_period"])


class LRScheduler:
    """Base class of batch- and epoch-driven learning-rate schedules.

    Subclasses implement :meth:`get_lr` from ``self.batch``, ``self.epoch``
    and ``self.base_lrs`` (the groups' learning rates at construction).
    """

    def __init__(self, optimizer: Optimizer) -> None:
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"{type(optimizer).__name__} is not an Optimizer")
        self.optimizer = optimizer
        for group in optimizer.param_groups:
            group.setdefault("base_lr", group["lr"])
        self.base_lrs = [group["base_lr"] for group in optimizer.param_groups]
        self.epoch = 0.0
        self.batch = 0.0
        self._set_lrs()

    def get_lr(self) -> List[float]:
        raise NotImplementedError

    def get_last_lr(self) -> List[float]:
        """Learning rates currently set in the optimizer's groups."""
        return [group["lr"] for group in self.optimizer.param_groups]

    def _set_lrs(self) -> None:
        for group, lr in zip(self.optimizer.param_groups, self.get_lr()):
            group["lr"] = lr

    def step_batch(self, batch: Optional[float] = None) -> None:
        """Advance the batch count by one (or set it to ``batch``)."""
        self.batch = self.batch + 1 if batch is None else float(batch)
        self._set_lrs()

    def step_epoch(self, epoch: Optional[float] = None) -> None:
        """Advance the epoch count by one (or set it to ``epoch``, the number
        of completed epochs, which may be fractional)."""
        self.epoch = self.epoch + 1 if epoch is None else float(epoch)
        self._set_lrs()

    def state_dict(self) -> Dict[str, Any]:
        return {
            key: value for key, value in self.__dict__.items() if key != "optimizer"
        }

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        self.__dict__.update(state_dict)
        self._set_lrs()


class Eden(LRScheduler):
    """Eden schedule of the Zipformer paper.

    Args:
      optimizer: the optimizer whose groups' ``lr`` are set.
      lr_batches: B, batches over which the lr decays by a factor ~2^0.25 the
        first time (the paper uses 7500).
      lr_epochs: E, the same in epochs (3.5 for LibriSpeech-scale data).
      warmup_batches: length of the linear warm-up.
      warmup_start: lr factor at batch 0.

    ``scale`` multiplies the schedule on top (1 at the start; training's
    ``--lr-plateau-factor`` lowers it when the validation loss stalls) and is
    part of the state, so a resumed run keeps its cuts.

    :meth:`set_cooldown` ends a run of known length: from batch ``end -
    batches`` the factor falls linearly to 0 at batch ``end`` (training's
    ``--lr-cooldown-batches`` with ``--max-batches``).  It is set by each call,
    not restored from a checkpoint.  :meth:`set_cooldown_fraction` is the same
    on another clock: the caller passes the fraction of the rate left (1 before
    the cool-down, falling to 0 at its end; training's ``--lr-cooldown-minutes``
    with ``--max-minutes``).
    """

    def __init__(
        self,
        optimizer: Optimizer,
        lr_batches: float = 7500.0,
        lr_epochs: float = 3.5,
        warmup_batches: float = 500.0,
        warmup_start: float = 0.5,
    ) -> None:
        if lr_batches <= 0 or lr_epochs <= 0:
            raise ValueError("lr_batches and lr_epochs must be positive")
        self.lr_batches = float(lr_batches)
        self.lr_epochs = float(lr_epochs)
        self.warmup_batches = float(warmup_batches)
        self.warmup_start = float(warmup_start)
        self.scale = 1.0
        self.cooldown: Optional[Tuple[float, float]] = None  # (first batch, last batch)
        self.cooldown_fraction = 1.0
        super().__init__(optimizer)

    def lr_factor(self) -> float:
        """The multiplier applied to every base learning rate."""
        b2, e2 = self.batch ** 2, self.epoch ** 2
        lb2, le2 = self.lr_batches ** 2, self.lr_epochs ** 2
        factor = ((b2 + lb2) / lb2) ** -0.25 * ((e2 + le2) / le2) ** -0.25
        if self.warmup_batches > 0 and self.batch < self.warmup_batches:
            frac = self.batch / self.warmup_batches
            factor *= self.warmup_start + (1.0 - self.warmup_start) * frac
        if self.cooldown is not None and self.batch > self.cooldown[0]:
            start, end = self.cooldown
            factor *= max(0.0, (end - self.batch) / (end - start))
        return factor * self.cooldown_fraction * self.scale

    def set_cooldown(self, batches: float, end: float) -> None:
        """Fall linearly to 0 over the ``batches`` batches before batch ``end``
        (``batches`` 0: no cool-down)."""
        if batches < 0 or (batches > 0 and end < batches):
            raise ValueError(f"a cool-down of {batches} batches cannot end at batch {end}")
        self.cooldown = (float(end - batches), float(end)) if batches > 0 else None
        self._set_lrs()

    def set_cooldown_fraction(self, fraction: float) -> None:
        """Multiply the rate by ``fraction`` (in [0, 1]) until the next call."""
        if not 0.0 <= fraction <= 1.0:
            raise ValueError(f"a cool-down fraction must be in [0, 1], got {fraction}")
        self.cooldown_fraction = float(fraction)
        self._set_lrs()

    def cut(self, factor: float) -> None:
        """Multiply the learning rate by ``factor`` from now on."""
        self.scale *= factor
        self._set_lrs()

    def get_lr(self) -> List[float]:
        factor = self.lr_factor()
        return [base * factor for base in self.base_lrs]


def make_optimizer(
    name: str,
    params: Iterable,
    lr: Optional[float] = None,
    **kwargs,
) -> Optimizer:
    """``"scaled_adam"`` (default lr 0.045) or ``"adamw"`` (default lr 1e-3)."""
    name = name.lower()
    if name in ("scaled_adam", "scaledadam"):
        return ScaledAdam(params, lr=0.045 if lr is None else lr, **kwargs)
    if name == "adamw":
        return torch.optim.AdamW(params, lr=1e-3 if lr is None else lr, **kwargs)
    raise ValueError(f"unknown optimizer {name!r}")
