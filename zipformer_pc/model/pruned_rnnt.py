"""Pruned RNN-T loss in plain PyTorch, for machines without k2.

The idea is k2's (Kuang et al., "Pruned RNN-T for fast, memory-efficient ASR
training", 2022); this is our own implementation, in PyTorch operations with
the lattice's forward and backward recursions written out:

1. A "simple" loss from a trivial joiner, ``logits(t, u) = am(t) + lm(u)``
   over the vocabulary.  Its normaliser for every lattice node is one batched
   matrix product of ``exp(am)`` and ``exp(lm)``, so the whole (T, U+1)
   lattice costs no (T, U+1, V) tensor.  ``lm_scale``/``am_scale`` mix in the
   predictor-only and encoder-only log-probabilities, as k2's smoothed loss.
2. The arc posteriors of that loss (its gradient with respect to the arc
   log-probabilities) give, per frame, the ``s_range`` consecutive symbol
   positions holding most of the alignment mass: the pruning bounds.
3. The real joiner is evaluated only on those positions, (N, T, s_range, V)
   instead of (N, T, U+1, V), and the same lattice recursion runs on its
   log-probabilities, with arcs outside the bounds removed.

With ``s_range >= U + 1`` nothing is pruned and the pruned loss equals the
full RNN-T loss (tested against torchaudio).  Lattice convention: symbol arcs
(t, u) -> (t, u+1), blank arcs (t, u) -> (t+1, u); a path starts at (0, 0) and
ends with the blank leaving (T-1, U), as in torchaudio and k2's "regular"
topology.

Removed arcs.  The recursions sum blank log-probabilities along each row
with one cumulative sum, so a removed arc cannot be a large negative number
(a few hundred frames of them would make sums of millions, whose float32
rounding errors exceed the loss).  Instead a removed blank arc adds 0 to the
sums, a symbol arc into a node outside the kept windows is -inf, and a node
outside them gets alpha = beta = -inf.  As the windows never move down and
move up by at most ``s_range - 1`` nodes a frame, each row is kept on one
interval of frames, so every path the sums admit runs through kept nodes
only.  The sums then stay as small as the log-probabilities of real paths,
and ``lattice_dtype=torch.float32`` agrees with float64 to about 1e-6 in the
loss and 1e-3 in the gradients, as close as float32 log-probabilities of a few
thousand allow (tests/model/test_pruned_rnnt.py; speed and memory:
benchmarks/loss_speed.py, docs/gpu-check.md).  float64 stays the default.
An utterance with more than ``s_range - 1`` tokens per frame has no path
through the windows: its pruned loss is inf (a batch train.py then skips as
non-finite; local/make_subsets.py already drops cuts with more tokens than
encoder frames).
"""

from typing import Optional, Tuple

import torch

#: the precision of the lattice recursions unless asked otherwise
DEFAULT_LATTICE_DTYPE = torch.float64


def _forward_scores(px: torch.Tensor, py: torch.Tensor, kept: Optional[torch.Tensor] = None) -> torch.Tensor:
    """alpha(t, u): log-weight of all partial paths from (0, 0) to node (t, u).

    Rows first: px (U, N, T), py and ``kept`` (U+1, N, T), alpha (U+1, N, T), so that
    each step of the recursion reads and writes whole contiguous rows.
    The recursion runs over the symbol positions u (U+1 steps, far fewer than
    the T frames of a BPE transducer), each step one logcumsumexp over time.
    cb[u, t] = sum of the blank arcs (u, 0..t-1), moving right along row u.  Row
    u is entered from row u-1 by a symbol arc at some frame k:
      alpha(t, u) = logsum_{k<=t} [alpha(k, u-1) + px(k, u-1)] + cb[t, u] - cb[k, u]
    ``kept``: the nodes of the pruned lattice; the others get -inf.
    """
    u1, n, _ = py.shape
    cb = torch.cat([py.new_zeros(u1, n, 1), py[:, :, :-1].cumsum(dim=2)], dim=2)
    alphas = torch.empty_like(py)
    off = float("-inf")  # a Python scalar: no host-to-device copy (which would wait for the GPU)
    alphas[0] = cb[0] if kept is None else torch.where(kept[0], cb[0], off)  # row 0: blanks only, from (0, 0)
    for u in range(1, u1):
        c = cb[u]
        row = c + torch.logcumsumexp(alphas[u - 1] + px[u - 1] - c, dim=1)
        alphas[u] = row if kept is None else torch.where(kept[u], row, off)
    return alphas


def _backward_scores(px: torch.Tensor, py: torch.Tensor, t_lens: torch.Tensor, u_lens: torch.Tensor,
                     kept: Optional[torch.Tensor] = None) -> torch.Tensor:
    """beta(t, u): log-weight of all partial paths from node (t, u) to the end,
    final blank included, rows first as :func:`_forward_scores` (U+1, N, T); -inf
    off each utterance's lattice.

    The mirror of :func:`_forward_scores`, from row U down: row u leaves to row
    u+1 by a symbol arc at some frame k >= t after the blanks t..k-1:
      beta(t, u) = logsum_{t<=k<T_n} [px(k, u) + beta(k, u+1) + cb[k, u]] - cb[t, u]
    and row U_n is blanks to the end, cb[T_n, U_n] - cb[t, U_n] + 0.
    """
    u1, n, t_max = py.shape
    cbf = torch.cat([py.new_zeros(u1, n, 1), py.cumsum(dim=2)], dim=2)  # (U+1, N, T+1)
    on_time = torch.arange(t_max, device=py.device)[None, :] < t_lens[:, None]  # (N, T)
    off = float("-inf")  # a Python scalar: no host-to-device copy (which would wait for the GPU)
    last = cbf.gather(2, t_lens.view(1, n, 1).expand(u1, n, 1))  # cb[T_n, u], (U+1, N, 1)
    betas = torch.empty_like(py)
    for u in range(u1 - 1, -1, -1):
        c = cbf[u, :, :-1]
        end_row = torch.where(on_time, last[u] - c, off)
        if u == u1 - 1:
            row = end_row
        else:
            leave = torch.where(on_time, px[u] + betas[u + 1] + c, off)
            row = torch.logcumsumexp(leave.flip(1), dim=1).flip(1) - c
            row = torch.where((u_lens == u)[:, None], end_row, row)
        on = (u_lens >= u)[:, None]
        betas[u] = torch.where(on if kept is None else on & kept[u], row, off)
    return betas


def _rows_first(x: torch.Tensor) -> torch.Tensor:
    """(N, T, U) -> (U, N, T), contiguous."""
    return x.permute(2, 0, 1).contiguous()


class _LatticeLoss(torch.autograd.Function):
    """-log Z with its gradient as the arc posteriors, computed by the backward
    recursion (autograd through the forward recursion's logcumsumexps costs
    several times the forward).  The posteriors are kept for a second backward
    (``pruned_rnnt_loss`` asks for them once for the pruning bounds and once
    more in the training loss's backward).  Inside, the lattice is stored rows
    first (U+1, N, T); the gradients go back as (N, T, U+1) views of it."""

    @staticmethod
    def forward(ctx, px, py, t_lens, u_lens, kept):
        n = py.size(0)
        px, py = _rows_first(px), _rows_first(py)
        kept = _rows_first(kept) if kept is not None else None
        alphas = _forward_scores(px, py, kept)
        idx_n = torch.arange(n, device=py.device)
        last_t = (t_lens - 1).clamp(min=0)
        log_z = alphas[u_lens, idx_n, last_t] + py[u_lens, idx_n, last_t]
        ctx.save_for_backward(px, py, alphas, t_lens, u_lens, log_z)
        ctx.kept = kept
        ctx.posteriors = None
        return -log_z

    @staticmethod
    def backward(ctx, grad):
        if ctx.posteriors is None:
            px, py, alphas, t_lens, u_lens, log_z = ctx.saved_tensors
            u1, n, _ = py.shape
            betas = _backward_scores(px, py, t_lens, u_lens, ctx.kept)
            base = alphas - log_z.view(1, n, 1)
            post_x = (base[:-1] + px + betas[1:]).exp()
            # a blank at (t, u) goes on to (t+1, u); the final blank leaves (T_n-1, U_n)
            after = torch.cat([betas[:, :, 1:], betas.new_full((u1, n, 1), float("-inf"))], dim=2)
            idx_n = torch.arange(n, device=py.device)
            after[u_lens, idx_n, (t_lens - 1).clamp(min=0)] = 0.0
            post_y = (base + py + after).exp()
            ctx.posteriors = (post_x.permute(1, 2, 0), post_y.permute(1, 2, 0))
            ctx.kept = None
        post_x, post_y = ctx.posteriors
        scale = -grad.view(-1, 1, 1)
        return post_x * scale, post_y * scale, None, None, None


class _ArcLogProbs(torch.autograd.Function):
    """``log_softmax(logits).gather(-1, idx)`` (the symbol and blank arcs of each kept node)
    without the (N, T, s, V) log-probabilities: only the log-normaliser is kept, and the
    backward writes the logits' gradient, ``scatter(g) - softmax * sum(g)``, into one tensor
    in place (autograd would fill a zero tensor, scatter into it, then make another for
    log_softmax's backward)."""

    @staticmethod
    def forward(ctx, logits, idx):
        lse = logits.logsumexp(dim=-1, keepdim=True)
        ctx.save_for_backward(logits, idx, lse)
        return logits.gather(-1, idx) - lse

    @staticmethod
    def backward(ctx, g):
        logits, idx, lse = ctx.saved_tensors
        grad = (logits - lse).exp_()
        grad.mul_(-g.sum(dim=-1, keepdim=True))
        return grad.scatter_add_(-1, idx, g), None


def lattice_loss(px: torch.Tensor, py: torch.Tensor, t_lens: torch.Tensor, u_lens: torch.Tensor,
                 kept: Optional[torch.Tensor] = None, dtype: torch.dtype = DEFAULT_LATTICE_DTYPE) -> torch.Tensor:
    """Negative log-probability of all alignments, per utterance.

    Args:
      px: (N, T, U) log-probability of emitting symbol u+1 at node (t, u).
      py: (N, T, U+1) log-probability of blank at node (t, u).
      t_lens, u_lens: (N,) frames (at least 1) and symbols of each utterance.
      kept: (N, T, U+1) bool, the nodes of a pruned lattice (None: all).  A removed
        node's blank arc must be 0 in ``py`` and symbol arcs into it -inf in ``px``
        (see the module's notes); the kept nodes of each row must be one interval of frames.
      dtype: the precision of the recursions (float64, or float32).
    Returns:
      (N,) losses in ``dtype``; their gradient with respect to px / py is minus
      the posterior of each arc.
    """
    long = dict(device=py.device, dtype=torch.long)
    return _LatticeLoss.apply(px.to(dtype), py.to(dtype), t_lens.to(**long), u_lens.to(**long), kept)


def _symbol_arcs(am: torch.Tensor, lm: torch.Tensor, y: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """am (N, T, V), lm (N, U+1, V), y (N, U) -> am[t, y_u] (N, T, U), lm[u, y_u] (N, U)."""
    n, t_max, _ = am.shape
    u = y.size(1)
    am_y = am.gather(2, y.unsqueeze(1).expand(n, t_max, u))
    lm_y = lm[:, :u].gather(2, y.unsqueeze(2)).squeeze(2)
    return am_y, lm_y


def simple_lattice(
    am: torch.Tensor, lm: torch.Tensor, y: torch.Tensor, blank_id: int, lm_scale: float = 0.0, am_scale: float = 0.0
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Arc log-probabilities (px, py) of the trivial joiner ``am(t) + lm(u)``, smoothed."""
    am = am.float()
    lm = lm.float()
    am_max = am.max(dim=2, keepdim=True).values.detach()
    lm_max = lm.max(dim=2, keepdim=True).values.detach()
    # log sum_v exp(am[t, v] + lm[u, v]) for every (t, u), by one matrix product
    norm = torch.matmul((am - am_max).exp(), (lm - lm_max).exp().transpose(1, 2))
    norm = norm.clamp(min=1e-30).log() + am_max + lm_max.transpose(1, 2)  # (N, T, U+1)
    am_y, lm_y = _symbol_arcs(am, lm, y)
    u = y.size(1)
    px = am_y + lm_y.unsqueeze(1) - norm[:, :, :u]
    py = am[:, :, blank_id].unsqueeze(2) + lm[:, :, blank_id].unsqueeze(1) - norm
    if lm_scale or am_scale:
        lm_norm = lm.logsumexp(dim=2)  # (N, U+1)
        am_norm = am.logsumexp(dim=2)  # (N, T)
        px_lm = (lm_y - lm_norm[:, :u]).unsqueeze(1)
        py_lm = (lm[:, :, blank_id] - lm_norm).unsqueeze(1)
        px_am = am_y - am_norm.unsqueeze(2)
        py_am = (am[:, :, blank_id] - am_norm).unsqueeze(2)
        w = 1.0 - lm_scale - am_scale
        px = w * px + lm_scale * px_lm + am_scale * px_am
        py = w * py + lm_scale * py_lm + am_scale * py_am
    return px, py


def prune_ranges(
    px_post: torch.Tensor, py_post: torch.Tensor, t_lens: torch.Tensor, u_lens: torch.Tensor, s_range: int
) -> torch.Tensor:
    """Start of the kept symbol window for every frame, (N, T) int64.

    Args:
      px_post, py_post: arc posteriors (N, T, U), (N, T, U+1).
      s_range: window size; frames keep nodes ``start .. start + s_range - 1``.
    The windows start at 0 on frame 0, never move down, move up by at most
    ``s_range - 1`` per frame (so consecutive windows share a node and every
    kept node can lie on a path) and contain U on the last frame.
    """
    n, t_max, u1 = py_post.shape
    s = min(s_range, u1)
    occ = py_post.clone(memory_format=torch.contiguous_format)  # the lattice gives it rows first
    occ[:, :, : u1 - 1] += px_post
    # mass of every window start: sum of occ over [start, start + s)
    csum = torch.cat([occ.new_zeros(n, t_max, 1), occ.cumsum(dim=2)], dim=2)
    window = csum[:, :, s:] - csum[:, :, : u1 - s + 1]  # (N, T, U+2-s)
    max_start = (u_lens + 1 - s).clamp(min=0)  # per utterance
    starts_ok = torch.arange(window.size(2), device=occ.device)[None, :] <= max_start[:, None]
    window = window.masked_fill(~starts_ok.unsqueeze(1), float("-inf"))
    start = window.argmax(dim=2)  # (N, T)
    frames = torch.arange(t_max, device=occ.device)[None, :]
    start = torch.where(frames >= (t_lens - 1)[:, None], max_start[:, None], start)  # last and padding frames
    start[:, 0] = 0
    start = torch.cummax(start, dim=1).values
    return connect_windows(start, t_lens, max_start, s - 1)


def connect_windows(start: torch.Tensor, t_lens: torch.Tensor, max_start: torch.Tensor, step: int) -> torch.Tensor:
    """Window starts (N, T) moved so that each frame's window is reachable from
    the previous one and can reach the last frame's, which starts at
    ``max_start`` (N,): two passes of a frame-by-frame rule, each as one scan.
    """
    frames = torch.arange(start.size(1), device=start.device)[None, :]
    # Reachable: start[t] = min(start[t], start[t-1] + step) for t = 1, 2, ...,
    # which unrolls to the min over k <= t of start[k] + (t - k) * step.
    ramp = frames * step
    start = torch.cummin(start - ramp, dim=1).values + ramp
    start[torch.arange(start.size(0), device=start.device), (t_lens - 1).clamp(min=0)] = max_start
    # Able to reach the end: start[t] = max(start[t], start[t+1] - step) for
    # t = T-2, ..., 0, i.e. the max over k >= t of start[k] - (k - t) * step.
    start = torch.flip(torch.cummax(torch.flip(start - ramp, dims=[1]), dim=1).values, dims=[1]) + ramp
    start[:, 0] = 0  # (if U > T * (s_range - 1) no window path exists: such arcs stay removed)
    return start


def pruned_rnnt_loss(
    encoder_out: torch.Tensor,
    encoder_lens: torch.Tensor,
    decoder_out: torch.Tensor,
    joiner,
    simple_am_proj: torch.nn.Module,
    simple_lm_proj: torch.nn.Module,
    y: torch.Tensor,
    y_lens: torch.Tensor,
    blank_id: int = 0,
    prune_range: int = 5,
    lm_scale: float = 0.25,
    am_scale: float = 0.0,
    lattice_dtype: torch.dtype = DEFAULT_LATTICE_DTYPE,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """(simple loss, pruned loss), each summed over the batch.

    Args:
      encoder_out: (N, T, C_enc); encoder_lens: (N,).
      decoder_out: (N, U+1, C_dec), the predictor on ``[blank] + y``.
      joiner: has ``encoder_proj``, ``decoder_proj`` and
        ``forward(enc, dec, project_input=False)``.
      y: (N, U) targets (padding ignored beyond ``y_lens``).
      lattice_dtype: the precision of the lattice recursions (float64; float32 is about as
        exact, see the module's notes, and takes half the memory).

    On a GPU the lattice spans the padded sizes of the inputs (T = ``encoder_out.size(1)``,
    U = ``y.size(1)``), which a batch's longest utterance fills, so that the lengths are not
    read on the host (each read waits for the GPU); on a CPU, where a read costs nothing, the
    padding beyond the longest lengths is cut off first (a head trained on some of a batch's
    utterances only).  The losses are the same either way.
    """
    if encoder_out.device.type == "cpu":
        t_max = int(encoder_lens.max())
        u_max = int(y_lens.max()) if y.numel() else 0
        encoder_out, y = encoder_out[:, :t_max], y[:, :u_max]
    n, t_max, u_max = y.size(0), encoder_out.size(1), y.size(1)
    decoder_out = decoder_out[:, : u_max + 1]
    u1 = u_max + 1

    px, py = simple_lattice(simple_am_proj(encoder_out), simple_lm_proj(decoder_out), y, blank_id, lm_scale, am_scale)
    simple = lattice_loss(px, py, encoder_lens, y_lens, dtype=lattice_dtype)
    if px.requires_grad or py.requires_grad:
        gpx, gpy = torch.autograd.grad(simple.sum(), [px, py], retain_graph=True, allow_unused=True)
    else:
        with torch.enable_grad():
            pxd, pyd = px.detach().requires_grad_(), py.detach().requires_grad_()
            gpx, gpy = torch.autograd.grad(lattice_loss(pxd, pyd, encoder_lens, y_lens, dtype=lattice_dtype).sum(),
                                           [pxd, pyd])
    start = prune_ranges(-gpx.detach(), -gpy.detach(), encoder_lens, y_lens, prune_range)
    s = min(prune_range, u1)
    nodes = start.unsqueeze(2) + torch.arange(s, device=start.device)  # (N, T, s) symbol positions kept

    enc_proj = joiner.encoder_proj(encoder_out)  # (N, T, J)
    dec_proj = joiner.decoder_proj(decoder_out)  # (N, U+1, J)
    j = dec_proj.size(2)
    # gathered from (N, U+1, J), not from an expanded (N, T, U+1, J) view: the
    # backward then adds into a tensor of the predictor's size, not the lattice's
    dec_kept = dec_proj.gather(1, nodes.reshape(n, t_max * s, 1).expand(n, t_max * s, j)).reshape(n, t_max, s, j)
    logits = joiner(enc_proj.unsqueeze(2), dec_kept, project_input=False).float()  # (N, T, s, V)
    del dec_kept  # (N, T, s, J), as large as the logits: not kept through the lattices
    y_ext = torch.cat([y, y.new_full((n, 1), blank_id)], dim=1)  # position U has no symbol arc
    sym = y_ext.gather(1, nodes.reshape(n, -1)).reshape(n, t_max, s)
    arcs = _ArcLogProbs.apply(logits, torch.stack([sym, torch.full_like(sym, blank_id)], dim=3))
    px_kept, py_kept = arcs[..., 0], arcs[..., 1]
    # removed arcs (module notes): blank 0, symbol -inf, also for a symbol arc leaving the window
    kept = torch.zeros(n, t_max, u1, dtype=torch.bool, device=nodes.device).scatter_(2, nodes, True)
    off = float("-inf")
    px_full = px_kept.new_full((n, t_max, u1), off).scatter(2, nodes, px_kept)[:, :, :u_max]
    px_full = px_full.masked_fill(~kept[:, :, 1:], off)
    py_full = py_kept.new_zeros((n, t_max, u1)).scatter(2, nodes, py_kept)
    pruned = lattice_loss(px_full, py_full, encoder_lens, y_lens, kept=kept, dtype=lattice_dtype)
    return simple.sum().float(), pruned.sum().float()
