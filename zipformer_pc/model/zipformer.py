"""Causal, chunked Zipformer encoder with explicit streaming states.

This is our own implementation of the encoder of "Zipformer: A faster and
better encoder for automatic speech recognition" (Yao et al., ICLR 2024),
made streaming-capable:

* a Conv2d front end (:class:`~zipformer_pc.model.subsampling.Conv2dSubsampling`)
  takes 80-dim fbank at 100 Hz to ~50 Hz;
* a sequence of encoder *stacks*; stack ``i`` runs its layers at
  ``50 / downsampling_factor[i]`` Hz (defaults 1,2,4,8,4,2): its input is
  downsampled by a learned softmax-weighted average of neighbouring frames,
  its output is upsampled by repetition and merged with its input through a
  learned per-channel bypass;
* every :class:`ZipformerLayer` follows the paper's block:
  FFN -> non-linear attention -> self-attention -> convolution -> FFN ->
  bypass -> self-attention -> convolution -> FFN -> BiasNorm -> bypass,
  where one set of multi-head attention weights (with relative positional
  scores) is computed per layer and shared by both self-attention modules
  and the non-linear attention module;
* training-only, gradient-only Balancer / Whiten regularisers
  (:mod:`zipformer_pc.model.scaling`) sit inside the feed-forward and convolution
  modules and on each layer's output (``EncoderConfig.use_regularizers``);
* the final output combines the last stack's output with the extra channels
  of earlier, wider stacks and is downsampled by 2 (25 Hz).

Causal mode (``EncoderConfig.causal``): attention uses chunked masks with a
limited left context and the time convolutions are chunk-wise causal (a
causal convolution over the past plus a convolution confined to the current
chunk; the front end's ConvNeXt is causal), so the encoder can be trained
with full-utterance batches (masks simulate streaming; chunk size and left
context are drawn at random per batch during training) and decoded chunk by
chunk with :meth:`ZipformerEncoder.streaming_forward`.

Streaming contract (chunk of ``c`` frames at 50 Hz, ``c`` a multiple of
:attr:`ZipformerEncoder.chunk_multiple`, left context ``L`` frames at 50 Hz,
a multiple of ``c``):

* each call consumes ``2 c + 7`` feature frames (100 Hz) and emits ``c / 2``
  output frames (25 Hz); the next call starts ``2 c`` feature frames later
  (windows overlap by the front end's 7-frame look-ahead ``pad_length``);
* states are a flat ``List[Tensor]`` from :meth:`get_init_states`, with
  fixed shapes for a given (batch, c, L); see :meth:`get_init_states`.
* the output of the chunk-by-chunk streaming equals the output of
  ``forward(x, x_lens, chunk_size=c, left_context_frames=L)`` for every valid
  output frame (up to float rounding), also for batches of different lengths.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
from dataclasses import dataclass
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

import torch
import torch.nn as nn
from torch import Tensor

from .scaling import (
    Balancer,
    BiasNorm,
    SharedDropout,
    SwooshL,
    SwooshR,
    Whiten,
    convert_num_channels,
    scaled_linear,
)
from .subsampling import Conv2dSubsampling
from ..features import SILENCE_LOG_MEL, tail_padded_frames

__all__ = [
    "EncoderConfig",
    "ENCODER_CONFIGS",
    "ZipformerEncoder",
    "ZipformerLayer",
    "ZipformerStack",
    "count_parameters",
    "estimate_transducer_parameters",
]

# Value used to fill masked attention scores (float32; half-precision types
# use half their most negative finite value).  Finite (not -inf) so a row
# whose keys are all masked (only possible for padding frames) gives a
# uniform distribution instead of NaN.
_MASK_VALUE = -1.0e9


def _mask_value(dtype: torch.dtype) -> float:
    return max(_MASK_VALUE, torch.finfo(dtype).min / 2)
# number of streaming state tensors per ZipformerLayer
_STATES_PER_LAYER = 6


# ---------------------------------------------------------------------------
# configuration


def _int_list(value: str, num_stacks: Optional[int] = None) -> Tuple[int, ...]:
    """Parse an icefall-style comma list ("2,2,3"); a single value is repeated
    ``num_stacks`` times."""
    items = tuple(int(v) for v in str(value).split(",") if v.strip() != "")
    if num_stacks is not None and len(items) == 1:
        items = items * num_stacks
    if num_stacks is not None and len(items) != num_stacks:
        raise ValueError(f"expected 1 or {num_stacks} values, got {value!r}")
    return items


@dataclass
class EncoderConfig:
    """Hyper-parameters of :class:`ZipformerEncoder` (icefall-style comma lists,
    one value per stack, or a single value for all stacks)."""

    num_encoder_layers: str = "2,2,3,4,3,2"
    downsampling_factor: str = "1,2,4,8,4,2"
    encoder_dim: str = "192,256,384,512,384,256"
    feedforward_dim: str = "512,768,1024,1536,1024,768"
    num_heads: str = "4,4,4,8,4,4"
    query_head_dim: str = "32"
    value_head_dim: str = "12"
    pos_head_dim: str = "4"
    pos_dim: int = 48
    #: channels that are never hit by the training-time feature masking
    encoder_unmasked_dim: str = "192,192,256,256,256,192"
    cnn_module_kernel: str = "31,31,15,15,15,31"
    causal: bool = True
    #: chunk sizes (frames at 50 Hz) drawn from in causal training; -1 = full
    chunk_size: str = "16,32,64,-1"
    #: left contexts (frames at 50 Hz) drawn from in causal training; -1 = all
    left_context_frames: str = "64,128,256,-1"
    feature_dim: int = 80
    #: expansion of the front end's ConvNeXt point-wise MLP (128 -> 128 x ratio
    #: channels at 50 Hz x 19 bins: the largest activations of a small model)
    convnext_hidden_ratio: int = 3
    #: channels of the front end's third convolution (icefall: 128); other
    #: counts need ``convnext_hidden_ratio=0``, since sherpa-onnx allocates the
    #: ConvNeXt cache with 128 channels
    front_end_channels: int = 128
    dropout: float = 0.1
    #: probability, per frame and utterance, of zeroing the channels above
    #: ``encoder_unmasked_dim`` at a stack input (training only)
    feature_mask_prob: float = 0.15
    #: gradient-only Balancer / Whiten regularisers in training (no effect
    #: on the forward pass)
    use_regularizers: bool = True

    @staticmethod
    def from_name(name: str, **overrides) -> "EncoderConfig":
        """A named configuration of :data:`ENCODER_CONFIGS`, with field
        ``overrides`` (e.g. ``causal=False``)."""
        if name not in ENCODER_CONFIGS:
            raise KeyError(f"unknown encoder config {name!r}; known: {sorted(ENCODER_CONFIGS)}")
        return dataclasses.replace(ENCODER_CONFIGS[name], **overrides)

    def with_overrides(self, **overrides) -> "EncoderConfig":
        """A copy with some fields replaced."""
        return dataclasses.replace(self, **overrides)

    @property
    def num_stacks(self) -> int:
        return len(_int_list(self.num_encoder_layers))

    def stack_values(self, field: str) -> Tuple[int, ...]:
        """The per-stack integer values of a comma-list field."""
        return _int_list(getattr(self, field), self.num_stacks)


ENCODER_CONFIGS: Dict[str, EncoderConfig] = {
    # The paper's ~65M-parameter (transducer) model layout.
    "paper": EncoderConfig(),
    # A few million parameters; trains on a CPU in minutes.  No front-end
    # ConvNeXt block: it took a third of the training step for nothing
    # measurable; a front end of 64 channels: a faster step, the same
    # learning per step (docs/cpu-training.md).
    "tiny": EncoderConfig(
        convnext_hidden_ratio=0,
        front_end_channels=64,
        num_encoder_layers="1,1,1,1,1,1",
        encoder_dim="128,128,192,192,192,128",
        feedforward_dim="384,384,512,512,512,384",
        num_heads="4,4,4,4,4,4",
        encoder_unmasked_dim="128,128,128,128,128,128",
        cnn_module_kernel="31,31,15,15,15,31",
        chunk_size="16,32,64,-1",
        left_context_frames="64,128,256,-1",
    ),
}


# ---------------------------------------------------------------------------
# relative positional encoding


def relative_position_table(
    min_offset: int,
    max_offset: int,
    pos_dim: int,
    device: Optional[torch.device] = None,
    dtype: torch.dtype = torch.float32,
) -> Tensor:
    """Sinusoidal embeddings of integer offsets ``min_offset .. max_offset``.

    The offset ``k = query_position - key_position`` is first compressed as
    ``sign(k) * s * log(1 + |k| / s)`` (s = 8): nearby offsets are resolved
    finely, distant ones coarsely, so few channels suffice.  The embedding of
    an offset depends on that offset only (not on the sequence length), which
    is what makes chunked streaming and full-utterance forward agree.

    Returns:
      (max_offset - min_offset + 1, pos_dim)
    """
    assert pos_dim % 2 == 0
    offsets = torch.arange(min_offset, max_offset + 1, device=device, dtype=torch.float32)
    s = 8.0
    compressed = torch.sign(offsets) * s * torch.log1p(offsets.abs() / s)
    # geometric frequencies from 1 down to 1/60 (compressed offsets of a
    # few thousand frames are ~50)
    freqs = torch.exp(
        -torch.linspace(0.0, math.log(60.0), pos_dim // 2, device=device, dtype=torch.float32)
    )
    angles = compressed.unsqueeze(1) * freqs.unsqueeze(0)
    return torch.cat((angles.sin(), angles.cos()), dim=1).to(dtype)


def relative_position_index(
    num_queries: int, query_start: int, num_keys: int, key_start: int, device: Optional[torch.device] = None
) -> Tuple[int, int, Tensor]:
    """Offsets between query positions ``query_start + i`` and key positions
    ``key_start + j``.

    Returns:
      (min_offset, max_offset, index) where ``index`` (num_queries, num_keys)
      is ``offset - min_offset``, a row index into
      :func:`relative_position_table` ``(min_offset, max_offset)``, made on
      ``device`` (where the attention runs: a copy from the CPU would wait for
      the GPU to finish all queued work, once per layer).
    """
    min_offset = query_start - (key_start + num_keys - 1)
    max_offset = query_start + num_queries - 1 - key_start
    q = torch.arange(num_queries, device=device).unsqueeze(1) + query_start
    k = torch.arange(num_keys, device=device).unsqueeze(0) + key_start
    return min_offset, max_offset, q - k - min_offset


class AttentionWindow(NamedTuple):
    """Chunked attention computed chunk by chunk (full-utterance forward).

    With chunks of ``chunk`` frames and ``left_chunks`` visible past chunks,
    the queries of chunk ``k`` see the keys of chunks ``k - left_chunks .. k``
    only: a window of ``width = (left_chunks + 1) * chunk`` keys, the same
    relative offsets for every chunk.  Scores, softmax and weighted sums are
    computed over these windows, (N, chunks, chunk, width), instead of over
    all T x T pairs of which the chunk mask would hide most; the outputs at
    valid frames equal those of the masked full attention.
    """

    chunk: int
    left_chunks: int

    @property
    def width(self) -> int:
        return (self.left_chunks + 1) * self.chunk

    def num_chunks(self, num_frames: int) -> int:
        return (num_frames + self.chunk - 1) // self.chunk

    def chunks(self, x: Tensor) -> Tensor:
        """(N, T, D) -> (N, num_chunks, chunk, D), zero-padded at the end."""
        n, t, d = x.shape
        nc = self.num_chunks(t)
        x = nn.functional.pad(x, (0, 0, 0, nc * self.chunk - t))
        return x.reshape(n, nc, self.chunk, d)

    def windows(self, x: Tensor) -> Tensor:
        """(N, T, D) -> (N, num_chunks, width, D): the frames each chunk's
        queries see, zeros before the first frame and after the last."""
        n, t, d = x.shape
        nc = self.num_chunks(t)
        x = nn.functional.pad(x, (0, 0, self.left_chunks * self.chunk, nc * self.chunk - t))
        return x.unfold(1, self.width, self.chunk).transpose(2, 3)

    def key_mask(self, lens: Tensor, num_frames: int) -> Tensor:
        """(N, num_chunks, 1, width) bool, True where a window's key lies
        before the first frame or at / beyond the utterance's ``lens``."""
        nc = self.num_chunks(num_frames)
        first = (torch.arange(nc, device=lens.device) - self.left_chunks) * self.chunk
        pos = first.unsqueeze(1) + torch.arange(self.width, device=lens.device)  # (nc, W)
        outside = (pos < 0) | (pos.unsqueeze(0) >= lens.view(-1, 1, 1))
        return outside.unsqueeze(2)

    def position_index(self, device: Optional[torch.device] = None) -> Tuple[int, int, Tensor]:
        """:func:`relative_position_index` of a chunk's queries and its window."""
        return relative_position_index(self.chunk, self.left_chunks * self.chunk, self.width, 0, device)


# ---------------------------------------------------------------------------
# layer components


class AttentionWeights(nn.Module):
    """Multi-head attention weights with relative positional scores.

    ``score[h, n, i, j] = q_h(x_i) . k_h(x_j) / sqrt(d_q) + p_h(x_i) . r_h(i - j)``
    where ``r_h`` is a learned low-dimensional projection (``pos_head_dim``
    per head) of the sinusoidal embedding of the offset.  The weights are
    computed once per layer and reused by the attention-like modules.
    """

    def __init__(
        self, embed_dim: int, num_heads: int, query_head_dim: int, pos_head_dim: int, pos_dim: int,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.query_head_dim = query_head_dim
        self.pos_head_dim = pos_head_dim
        self.key_dim = num_heads * query_head_dim
        self.in_proj = nn.Linear(embed_dim, 2 * self.key_dim + num_heads * pos_head_dim)
        self.linear_pos = nn.Linear(pos_dim, num_heads * pos_head_dim, bias=False)
        self.dropout = nn.Dropout(dropout)

    def forward(
        self,
        x: Tensor,
        pos_table: Tensor,
        pos_index: Tensor,
        mask: Tensor,
        cached_key: Optional[Tensor] = None,
        window: Optional[AttentionWindow] = None,
    ) -> Tuple[Tensor, Optional[Tensor]]:
        """
        Args:
          x: (N, T, C) queries (and new keys).
          pos_table: (P, pos_dim) embeddings of the offsets in ``pos_index``.
          pos_index: (T, S) row of ``pos_table`` for each (query, key) pair;
            with ``window``, (chunk, width) for every chunk's window.
          mask: (N, T or 1, S) bool, True = key not visible; with ``window``,
            (N, num_chunks, 1, width).
          cached_key: (N, S - T, key_dim) keys of the left context
            (streaming), or None (full forward, S == T).
          window: chunk-by-chunk attention (full forward only), or None.
        Returns:
          (weights (H, N, T, S), or (H, N, num_chunks, chunk, width) with
          ``window``; new key cache (N, S - T, key_dim) or None).
        """
        n, t, _ = x.shape
        h = self.num_heads
        q, k, p = self.in_proj(x).split(
            [self.key_dim, self.key_dim, h * self.pos_head_dim], dim=-1
        )
        new_cache = None
        if cached_key is not None:
            k = torch.cat((cached_key, k), dim=1)
            new_cache = k[:, k.size(1) - cached_key.size(1) :, :]
        dq, dp = self.query_head_dim, self.pos_head_dim
        if window is None:
            s = k.size(1)
            q = q.reshape(n, t, h, dq).permute(2, 0, 1, 3)  # (H, N, T, dq)
            k = k.reshape(n, s, h, dq).permute(2, 0, 3, 1)  # (H, N, dq, S)
            p = p.reshape(n, t, h, dp).permute(2, 0, 1, 3)  # (H, N, T, dp)
        else:
            nc, c, s = window.num_chunks(t), window.chunk, window.width
            q = window.chunks(q).reshape(n, nc, c, h, dq).permute(3, 0, 1, 2, 4)
            k = window.windows(k).reshape(n, nc, s, h, dq).permute(3, 0, 1, 4, 2)
            p = window.chunks(p).reshape(n, nc, c, h, dp).permute(3, 0, 1, 2, 4)
        # scores (H, N, T, S) or (H, N, num_chunks, chunk, width)
        scores = torch.matmul(q, k) * (dq ** -0.5)
        r = self.linear_pos(pos_table)  # (P, H * dp)
        r = r.reshape(-1, h, dp).permute(1, 2, 0).unsqueeze(1)  # (H, 1, dp, P)
        if window is not None:
            r = r.unsqueeze(1)
        pos_scores = torch.matmul(p, r)  # (H, N, [num_chunks,] T or chunk, P)
        index = pos_index.to(x.device).expand(scores.shape)
        scores = scores + torch.gather(pos_scores, dim=-1, index=index)

        scores = scores.masked_fill(mask.unsqueeze(0), _mask_value(scores.dtype))
        weights = scores.softmax(dim=-1)
        return self.dropout(weights), new_cache


def _cat_cache(cache: Optional[Tensor], new: Tensor) -> Tuple[Tensor, Optional[Tensor]]:
    """Prepend a (N, L, D) cache to (N, T, D) frames; return the
    concatenation and its last L frames (the next cache)."""
    if cache is None:
        return new, None
    full = torch.cat((cache, new), dim=1)
    return full, full[:, full.size(1) - cache.size(1) :, :]


class SelfAttention(nn.Module):
    """Applies precomputed attention weights to per-head value projections."""

    def __init__(self, embed_dim: int, num_heads: int, value_head_dim: int) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.value_head_dim = value_head_dim
        self.value_dim = num_heads * value_head_dim
        self.in_proj = nn.Linear(embed_dim, self.value_dim)
        self.out_proj = scaled_linear(self.value_dim, embed_dim, initial_scale=0.05)

    def forward(
        self, x: Tensor, weights: Tensor, cached_value: Optional[Tensor] = None,
        window: Optional[AttentionWindow] = None,
    ) -> Tuple[Tensor, Optional[Tensor]]:
        """
        Args:
          x: (N, T, C)
          weights: (H, N, T, S) attention weights, or (H, N, num_chunks,
            chunk, width) with ``window`` (:class:`AttentionWeights`).
          cached_value: (N, S - T, value_dim) or None.
          window: the chunk-by-chunk layout of ``weights``, or None.
        Returns:
          (output (N, T, C), new value cache or None).
        """
        n, t, _ = x.shape
        v, new_cache = _cat_cache(cached_value, self.in_proj(x))
        h, dv = self.num_heads, self.value_head_dim
        if window is None:
            s = v.size(1)
            v = v.reshape(n, s, h, dv).permute(2, 0, 1, 3)
            out = torch.matmul(weights, v)  # (H, N, T, dv)
            out = out.permute(1, 2, 0, 3).reshape(n, t, self.value_dim)
        else:
            nc, s = window.num_chunks(t), window.width
            v = window.windows(v).reshape(n, nc, s, h, dv).permute(3, 0, 1, 2, 4)
            out = torch.matmul(weights, v)  # (H, N, num_chunks, chunk, dv)
            out = out.permute(1, 2, 3, 0, 4).reshape(n, -1, self.value_dim)[:, :t]
        return self.out_proj(out), new_cache


class NonlinAttention(nn.Module):
    """Non-linear attention of the paper: ``out = W_o((A (v * tanh(s))) * y)``
    where ``s, v, y`` are three projections of the input and ``A`` is the
    first head's attention weights."""

    def __init__(self, embed_dim: int, hidden_dim: int) -> None:
        super().__init__()
        self.hidden_dim = hidden_dim
        self.in_proj = nn.Linear(embed_dim, 3 * hidden_dim)
        self.out_proj = scaled_linear(hidden_dim, embed_dim, initial_scale=0.05)

    def forward(
        self, x: Tensor, weights: Tensor, cache: Optional[Tensor] = None,
        window: Optional[AttentionWindow] = None,
    ) -> Tuple[Tensor, Optional[Tensor]]:
        """
        Args:
          x: (N, T, C)
          weights: (1, N, T, S) attention weights of one head, or (1, N,
            num_chunks, chunk, width) with ``window``.
          cache: (N, S - T, hidden_dim) gated values of the left context.
          window: the chunk-by-chunk layout of ``weights``, or None.
        Returns:
          (output (N, T, C), new cache or None).
        """
        t = x.size(1)
        s, v, y = self.in_proj(x).chunk(3, dim=-1)
        v = v * torch.tanh(s)
        v, new_cache = _cat_cache(cache, v)
        if window is None:
            out = torch.matmul(weights[0], v)  # (N, T, hidden)
        else:
            out = torch.matmul(weights[0], window.windows(v))  # (N, num_chunks, chunk, hidden)
            out = out.reshape(x.size(0), -1, self.hidden_dim)[:, :t]
        return self.out_proj(out * y), new_cache


class ConvolutionModule(nn.Module):
    """Gated depthwise-convolution module.

    in_proj (C -> 2C) -> GLU-style gate -> depthwise convolution -> SwooshR
    -> out_proj.  Padding frames are zeroed before the convolution so they
    cannot leak into valid frames.

    Non-causal mode: one centred depthwise convolution of kernel K.

    Causal mode ("chunk-wise causal"): the sum of

    * a causal depthwise convolution of kernel ``(K + 1) // 2`` that sees the
      past (its ``(K - 1) // 2`` frames of history are the streaming cache),
      and
    * a centred depthwise convolution of kernel K applied to each attention
      chunk separately (zero padding at the chunk edges), which uses the
      future frames available inside the current chunk and nothing beyond.

    With ``chunk_size = -1`` (full context) the second convolution spans the
    whole utterance.
    """

    def __init__(
        self, channels: int, kernel_size: int, causal: bool, use_regularizers: bool = True
    ) -> None:
        super().__init__()
        assert kernel_size % 2 == 1, kernel_size
        self.channels = channels
        self.kernel_size = kernel_size
        self.causal = causal
        self.in_proj = nn.Linear(channels, 2 * channels)
        if causal:
            causal_kernel = (kernel_size + 1) // 2
            self.cache_frames = causal_kernel - 1
            self.depthwise = nn.Conv1d(channels, channels, causal_kernel, groups=channels)
            self.chunkwise = nn.Conv1d(
                channels, channels, kernel_size, padding=kernel_size // 2, groups=channels,
                bias=False,
            )
            with torch.no_grad():
                self.chunkwise.weight.mul_(0.5)
        else:
            self.cache_frames = 0
            self.depthwise = nn.Conv1d(
                channels, channels, kernel_size, padding=kernel_size // 2, groups=channels
            )
            self.chunkwise = None
        self.activation = SwooshR()
        self.out_proj = scaled_linear(channels, channels, initial_scale=0.05)
        if use_regularizers:
            self.balancer = Balancer(channels, channel_dim=1, min_positive=0.05, max_positive=1.0,
                                     min_abs=0.2, max_abs=10.0)
            self.whiten = Whiten(whitening_limit=5.0, grad_scale=0.01)
        else:
            self.balancer = nn.Identity()
            self.whiten = nn.Identity()

    def _chunkwise_conv(self, x: Tensor, chunk_size: int) -> Tensor:
        """Centred convolution inside each chunk of ``chunk_size`` frames:
        (N, C, T) -> (N, C, T)."""
        assert self.chunkwise is not None
        n, c, t = x.shape
        if chunk_size <= 0 or chunk_size >= t:
            return self.chunkwise(x)
        num_chunks = (t + chunk_size - 1) // chunk_size
        x = nn.functional.pad(x, (0, num_chunks * chunk_size - t))
        x = x.reshape(n, c, num_chunks, chunk_size).permute(0, 2, 1, 3)
        x = x.reshape(n * num_chunks, c, chunk_size)
        y = self.chunkwise(x).reshape(n, num_chunks, c, chunk_size).permute(0, 2, 1, 3)
        return y.reshape(n, c, num_chunks * chunk_size)[:, :, :t]

    def forward(
        self,
        x: Tensor,
        pad_mask: Tensor,
        chunk_size: int = -1,
        cache: Optional[Tensor] = None,
    ) -> Tuple[Tensor, Optional[Tensor]]:
        """
        Args:
          x: (N, T, C)
          pad_mask: (N, T) bool, True at padding frames.
          chunk_size: chunk length in frames at this rate (causal mode), -1 =
            one chunk (also used in streaming, where x is one chunk).
          cache: (N, C, (K - 1) // 2) previous gated frames (streaming,
            causal only) or None.
        Returns:
          (output (N, T, C), new cache or None).
        """
        a, g = self.in_proj(x).chunk(2, dim=-1)
        x = a * torch.sigmoid(g)
        x = x.masked_fill(pad_mask.unsqueeze(-1), 0.0).transpose(1, 2)  # (N, C, T)
        new_cache = None
        if not self.causal:
            y = self.depthwise(x)
        else:
            if cache is not None:
                history = torch.cat((cache, x), dim=2)
                new_cache = history[:, :, history.size(2) - cache.size(2) :]
            else:
                history = nn.functional.pad(x, (self.cache_frames, 0))
            y = self.depthwise(history) + self._chunkwise_conv(x, chunk_size)
        y = self.activation(self.balancer(y)).transpose(1, 2)
        return self.whiten(self.out_proj(y)), new_cache


class FeedForward(nn.Module):
    """Linear -> SwooshL -> dropout -> Linear (small initial output scale)."""

    def __init__(
        self, embed_dim: int, hidden_dim: int, dropout: float, use_regularizers: bool = True
    ) -> None:
        super().__init__()
        self.in_proj = nn.Linear(embed_dim, hidden_dim)
        self.activation = SwooshL()
        self.dropout = SharedDropout(dropout)
        self.out_proj = scaled_linear(hidden_dim, embed_dim, initial_scale=0.1)
        if use_regularizers:
            self.balancer = Balancer(hidden_dim, min_positive=0.3, max_positive=1.0,
                                     min_abs=0.75, max_abs=5.0)
            self.whiten = Whiten(whitening_limit=5.0, grad_scale=0.01)
        else:
            self.balancer = nn.Identity()
            self.whiten = nn.Identity()

    def forward(self, x: Tensor) -> Tensor:
        """(N, T, C) -> (N, T, C)"""
        hidden = self.activation(self.balancer(self.in_proj(x)))
        return self.whiten(self.out_proj(self.dropout(hidden)))


class Bypass(nn.Module):
    """Learned per-channel interpolation ``x_orig + c * (x_new - x_orig)``,
    with ``c`` clamped to ``[min_scale, max_scale]``."""

    def __init__(
        self, channels: int, initial_scale: float = 0.5, min_scale: float = 0.2, max_scale: float = 1.0
    ) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.full((channels,), initial_scale))
        self.min_scale = min_scale
        self.max_scale = max_scale

    def forward(self, x_orig: Tensor, x_new: Tensor) -> Tensor:
        """(N, T, C), (N, T, C) -> (N, T, C)"""
        scale = self.scale.clamp(self.min_scale, self.max_scale)
        return x_orig + (x_new - x_orig) * scale


class ZipformerLayer(nn.Module):
    """One Zipformer block (paper, Fig. 2).

    Args:
      embed_dim: C.
      num_heads: attention heads.
      query_head_dim, value_head_dim, pos_head_dim: per-head sizes.
      pos_dim: size of the sinusoidal offset embedding.
      feedforward_dim: F; the three FFNs use 3F/4, F and 5F/4.
      cnn_module_kernel: depthwise kernel size K.
      causal: causal convolutions.
      dropout: dropout on module outputs and inside FFNs (:class:`SharedDropout`:
        one mask per utterance and channel, shared by its frames).
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        query_head_dim: int,
        value_head_dim: int,
        pos_head_dim: int,
        pos_dim: int,
        feedforward_dim: int,
        cnn_module_kernel: int,
        causal: bool,
        dropout: float,
        use_regularizers: bool = True,
    ) -> None:
        super().__init__()
        self.embed_dim = embed_dim
        self.attn_weights = AttentionWeights(
            embed_dim, num_heads, query_head_dim, pos_head_dim, pos_dim, dropout=0.0
        )
        reg = use_regularizers
        self.ff1 = FeedForward(embed_dim, (feedforward_dim * 3) // 4, dropout, reg)
        self.ff2 = FeedForward(embed_dim, feedforward_dim, dropout, reg)
        self.ff3 = FeedForward(embed_dim, (feedforward_dim * 5) // 4, dropout, reg)
        self.nonlin_attention = NonlinAttention(embed_dim, (embed_dim * 3) // 4)
        self.self_attn1 = SelfAttention(embed_dim, num_heads, value_head_dim)
        self.self_attn2 = SelfAttention(embed_dim, num_heads, value_head_dim)
        self.conv1 = ConvolutionModule(embed_dim, cnn_module_kernel, causal, reg)
        self.conv2 = ConvolutionModule(embed_dim, cnn_module_kernel, causal, reg)
        self.norm = BiasNorm(embed_dim)
        self.out_balancer = (
            Balancer(embed_dim, min_positive=0.05, max_positive=0.95, min_abs=0.2, max_abs=4.0)
            if reg else nn.Identity()
        )
        self.bypass_mid = Bypass(embed_dim)
        self.bypass = Bypass(embed_dim)
        self.dropout = SharedDropout(dropout)

    def state_shapes(self, batch_size: int, left: int) -> List[Tuple[int, ...]]:
        """Shapes of this layer's 6 streaming caches for ``left`` cached frames:
        key, non-linear attention, value 1, value 2, conv 1, conv 2."""
        k = self.conv1.cache_frames
        return [
            (batch_size, left, self.attn_weights.key_dim),
            (batch_size, left, self.nonlin_attention.hidden_dim),
            (batch_size, left, self.self_attn1.value_dim),
            (batch_size, left, self.self_attn2.value_dim),
            (batch_size, self.embed_dim, k),
            (batch_size, self.embed_dim, k),
        ]

    def forward(
        self,
        x: Tensor,
        pos_table: Tensor,
        pos_index: Tensor,
        attn_mask: Tensor,
        pad_mask: Tensor,
        conv_chunk: int = -1,
        states: Optional[List[Tensor]] = None,
        window: Optional[AttentionWindow] = None,
    ) -> Tuple[Tensor, Optional[List[Tensor]]]:
        """
        Args:
          x: (N, T, C)
          pos_table, pos_index: relative-position embeddings (see
            :class:`AttentionWeights`).
          attn_mask: (N, T or 1, S) bool, True = not visible (with
            ``window``: (N, num_chunks, 1, width)).
          pad_mask: (N, T) bool, True at padding frames (zeroed at the output).
          conv_chunk: chunk length (frames at this rate) of the chunk-wise
            convolutions, -1 = whole input.
          states: None (full forward) or this layer's 6 caches (streaming).
          window: chunk-by-chunk attention (full forward), or None.
        Returns:
          (output (N, T, C), new states or None).
        """
        if states is None:
            states = [None] * _STATES_PER_LAYER  # type: ignore[list-item]
        key_c, nla_c, v1_c, v2_c, conv1_c, conv2_c = states
        x_orig = x
        x = x + self.dropout(self.ff1(x))
        weights, key_c = self.attn_weights(x, pos_table, pos_index, attn_mask, key_c, window)
        y, nla_c = self.nonlin_attention(x, weights[0:1], nla_c, window)
        x = x + self.dropout(y)
        y, v1_c = self.self_attn1(x, weights, v1_c, window)
        x = x + self.dropout(y)
        y, conv1_c = self.conv1(x, pad_mask, conv_chunk, conv1_c)
        x = x + self.dropout(y)
        x = x + self.dropout(self.ff2(x))
        x = self.bypass_mid(x_orig, x)
        y, v2_c = self.self_attn2(x, weights, v2_c, window)
        x = x + self.dropout(y)
        y, conv2_c = self.conv2(x, pad_mask, conv_chunk, conv2_c)
        x = x + self.dropout(y)
        x = x + self.dropout(self.ff3(x))
        x = self.bypass(x_orig, self.out_balancer(self.norm(x)))
        x = x.masked_fill(pad_mask.unsqueeze(-1), 0.0)
        if key_c is None:
            return x, None
        return x, [key_c, nla_c, v1_c, v2_c, conv1_c, conv2_c]


class Downsample(nn.Module):
    """Downsample by ``factor`` with a learned softmax-weighted average of each
    group of ``factor`` frames (zero-padding the end to a multiple)."""

    def __init__(self, factor: int) -> None:
        super().__init__()
        self.factor = factor
        # near-uniform averaging at the start; small random logits (not zeros)
        # so that ScaledAdam's scale-relative steps can move them
        self.weights = nn.Parameter(0.05 * torch.randn(factor))

    def forward(self, x: Tensor) -> Tensor:
        """(N, T, C) -> (N, ceil(T / factor), C)"""
        n, t, c = x.shape
        d = self.factor
        t_out = (t + d - 1) // d
        if t_out * d != t:
            x = nn.functional.pad(x, (0, 0, 0, t_out * d - t))
        x = x.reshape(n, t_out, d, c)
        return torch.einsum("ntdc,d->ntc", x, self.weights.softmax(dim=0))


def upsample(x: Tensor, factor: int, num_frames: int) -> Tensor:
    """Repeat each frame ``factor`` times and keep the first ``num_frames``:
    (N, T, C) -> (N, num_frames, C)."""
    n, t, c = x.shape
    x = x.unsqueeze(2).expand(n, t, factor, c).reshape(n, t * factor, c)
    return x[:, :num_frames]


def add_tail_silence(x: Tensor, x_lens: Tensor, chunk_size: int) -> Tuple[Tensor, Tensor]:
    """Append the silence every utterance is encoded with (training, decoding and
    the streaming runtime alike; :func:`zipformer_pc.features.tail_padded_frames`).

    Args:
      x: (N, T, F) features, frames at or beyond ``x_lens`` being padding.
      x_lens: (N,) real frames per utterance.
      chunk_size: the attention chunk the encoder runs with (50 Hz frames,
        <= 0: full context).
    Returns:
      (x', x_lens'): each utterance followed by silence (:data:`SILENCE_LOG_MEL`)
      up to its new length, which counts the silence as valid frames.
    """
    new = [tail_padded_frames(int(n), chunk_size) for n in x_lens.tolist()]
    new_lens = torch.tensor(new, dtype=x_lens.dtype, device=x_lens.device)
    t = max(max(new, default=0), x.size(1))  # from the host list: no second read of the device
    out = x.new_full((x.size(0), t, x.size(2)), SILENCE_LOG_MEL)
    frame = torch.arange(x.size(1), device=x.device).unsqueeze(0)
    real = (frame < x_lens.unsqueeze(1)).unsqueeze(-1)
    out[:, : x.size(1)] = torch.where(real, x, out[:, : x.size(1)])
    return out, new_lens


def _ceil_div(x: Tensor, d: int) -> Tensor:
    return torch.div(x + (d - 1), d, rounding_mode="floor")


class ZipformerStack(nn.Module):
    """Layers running at ``50 / downsampling_factor`` Hz with a learned bypass.

    Input and output are at 50 Hz; frames are downsampled before the layers
    and upsampled after them, and the result is merged with the input by a
    per-channel :class:`Bypass`.
    """

    def __init__(self, num_layers: int, downsampling_factor: int, **layer_kwargs) -> None:
        super().__init__()
        self.factor = downsampling_factor
        self.layers = nn.ModuleList([ZipformerLayer(**layer_kwargs) for _ in range(num_layers)])
        self.embed_dim = layer_kwargs["embed_dim"]
        self.pos_dim = layer_kwargs["pos_dim"]
        self.downsample = Downsample(downsampling_factor) if downsampling_factor > 1 else None
        self.out_bypass = Bypass(self.embed_dim, initial_scale=0.5, min_scale=0.0, max_scale=1.0)
        #: chunked attention of the full forward window by window
        #: (:class:`AttentionWindow`): None = where it is faster (see
        #: :meth:`use_windows`), True = always, False = never (a masked
        #: T x T score matrix, the reference the windows are tested against)
        self.attention_windows: Optional[bool] = None

    def _run_layers(
        self,
        x: Tensor,
        x_orig: Tensor,
        pos_table: Tensor,
        pos_index: Tensor,
        attn_mask: Tensor,
        pad_mask: Tensor,
        conv_chunk: int,
        states: Optional[List[Tensor]],
        window: Optional[AttentionWindow] = None,
    ) -> Tuple[Tensor, List[Tensor]]:
        new_states: List[Tensor] = []
        for i, layer in enumerate(self.layers):
            layer_states = None
            if states is not None:
                layer_states = states[i * _STATES_PER_LAYER : (i + 1) * _STATES_PER_LAYER]
            x, out_states = layer(
                x, pos_table, pos_index, attn_mask, pad_mask, conv_chunk, layer_states, window
            )
            if out_states is not None:
                new_states.extend(out_states)
        x = upsample(x, self.factor, x_orig.size(1))
        return self.out_bypass(x_orig, x), new_states

    def use_windows(self, chunk: int, left_chunks: int, num_frames: int) -> bool:
        """Whether chunked attention over ``num_frames`` frames (this stack's
        rate) runs window by window.  Automatically when the input holds at
        least four windows: a tiny training step of 2 x 14 s (700 frames at
        50 Hz, chunk 32 and left context 128: windows of 160) took 15-21%
        less time with windows in every stack, one of 5 x 6 s (300 frames,
        windows of 80 or 160) 1-2% more."""
        width = (left_chunks + 1) * chunk
        if self.attention_windows is None:
            return num_frames >= 4 * width
        return self.attention_windows and width < num_frames

    def forward(self, x: Tensor, lens: Tensor, chunk_size: int, left_chunks: int) -> Tensor:
        """Full-sequence forward with (optionally) chunked attention masks.

        Args:
          x: (N, T, C) at 50 Hz, zero at padding frames.
          lens: (N,) valid frames at 50 Hz.
          chunk_size: chunk in 50 Hz frames (multiple of the factor), or -1.
          left_chunks: visible past chunks, or -1 for all.
        Returns:
          (N, T, C), zero at padding frames.
        """
        d = self.factor
        xd = self.downsample(x) if self.downsample is not None else x
        t = xd.size(1)
        lens_d = _ceil_div(lens, d)
        positions = torch.arange(t, device=x.device)
        pad_mask = positions.unsqueeze(0) >= lens_d.unsqueeze(1)  # (N, T_d)
        conv_chunk = chunk_size // d if chunk_size > 0 else -1
        window = None
        if chunk_size > 0 and left_chunks >= 0 and self.use_windows(conv_chunk, left_chunks, t):
            window = AttentionWindow(conv_chunk, left_chunks)
            attn_mask = window.key_mask(lens_d, t)
            min_off, max_off, pos_index = window.position_index(x.device)
        else:
            attn_mask = pad_mask.unsqueeze(1)  # (N, 1, T_d)
            if chunk_size > 0:
                chunk_idx = positions // conv_chunk
                diff = chunk_idx.unsqueeze(1) - chunk_idx.unsqueeze(0)  # query chunk - key chunk
                chunk_mask = diff < 0
                if left_chunks >= 0:
                    chunk_mask = chunk_mask | (diff > left_chunks)
                attn_mask = attn_mask | chunk_mask.unsqueeze(0)
            min_off, max_off, pos_index = relative_position_index(t, 0, t, 0, x.device)
        pos_table = relative_position_table(min_off, max_off, self.pos_dim, x.device, x.dtype)
        out, _ = self._run_layers(
            xd, x, pos_table, pos_index, attn_mask, pad_mask, conv_chunk, None, window
        )
        full_pad = torch.arange(x.size(1), device=x.device).unsqueeze(0) >= lens.unsqueeze(1)
        return out.masked_fill(full_pad.unsqueeze(-1), 0.0)

    def streaming_forward(
        self,
        x: Tensor,
        processed_frames: Tensor,
        lens: Tensor,
        states: List[Tensor],
    ) -> Tuple[Tensor, List[Tensor]]:
        """One chunk.

        Args:
          x: (N, c, C) chunk at 50 Hz (c a multiple of the factor).
          processed_frames: (N,) 50 Hz frames before this chunk (multiple of c).
          lens: (N,) valid 50 Hz frames up to the end of this chunk.
          states: the 6 caches of each layer, in order.
        Returns:
          (output (N, c, C), new states).
        """
        d = self.factor
        xd = self.downsample(x) if self.downsample is not None else x
        t = xd.size(1)
        left = states[0].size(1)
        start = torch.div(processed_frames, d, rounding_mode="floor").unsqueeze(1)  # (N, 1)
        lens_d = _ceil_div(lens, d).unsqueeze(1)
        key_pos = start + torch.arange(-left, t, device=x.device).unsqueeze(0)  # (N, S)
        key_mask = (key_pos < 0) | (key_pos >= lens_d)
        query_pos = start + torch.arange(t, device=x.device).unsqueeze(0)
        pad_mask = query_pos >= lens_d
        min_off, max_off, pos_index = relative_position_index(t, left, t + left, 0, x.device)
        pos_table = relative_position_table(min_off, max_off, self.pos_dim, x.device, x.dtype)
        out, new_states = self._run_layers(
            xd, x, pos_table, pos_index, key_mask.unsqueeze(1), pad_mask, -1, states
        )
        full_pos = processed_frames.unsqueeze(1) + torch.arange(x.size(1), device=x.device)
        full_pad = full_pos >= lens.unsqueeze(1)
        return out.masked_fill(full_pad.unsqueeze(-1), 0.0), new_states


# ---------------------------------------------------------------------------
# the encoder


class ZipformerEncoder(nn.Module):
    """Conv2d front end + Zipformer stacks + output downsampling (25 Hz).

    ``encoder(features (N, T, 80), feature_lens (N,)) ->
    (out (N, T', output_dim), out_lens (N,))`` with
    ``T' = ((T - 7) // 2 + 1) // 2``.

    Args:
      config: an :class:`EncoderConfig`.
    """

    def __init__(self, config: EncoderConfig) -> None:
        super().__init__()
        self.config = config
        num_stacks = config.num_stacks
        layers = config.stack_values("num_encoder_layers")
        factors = config.stack_values("downsampling_factor")
        dims = config.stack_values("encoder_dim")
        ff_dims = config.stack_values("feedforward_dim")
        heads = config.stack_values("num_heads")
        q_dims = config.stack_values("query_head_dim")
        v_dims = config.stack_values("value_head_dim")
        p_dims = config.stack_values("pos_head_dim")
        unmasked = config.stack_values("encoder_unmasked_dim")
        kernels = config.stack_values("cnn_module_kernel")
        self.encoder_dims = dims
        self.unmasked_dims = unmasked
        self.factors = factors
        self.output_dim = max(dims)
        self.output_downsampling_factor = 2
        self.chunk_sizes = _int_list(config.chunk_size)
        self.left_context_list = _int_list(config.left_context_frames)
        self.last_chunk_config: Tuple[int, int] = (-1, -1)

        # every stack's chunk (and the output downsampling) must be whole
        lcm = self.output_downsampling_factor
        for f in factors:
            lcm = lcm * f // math.gcd(lcm, f)
        #: streaming chunk sizes (50 Hz frames) must be multiples of this
        self.chunk_multiple = lcm

        self.encoder_embed = Conv2dSubsampling(config.feature_dim, dims[0], layer3_channels=config.front_end_channels,
                                               dropout=config.dropout,
                                               convnext_hidden_ratio=config.convnext_hidden_ratio)
        self.stacks = nn.ModuleList(
            ZipformerStack(
                layers[i],
                factors[i],
                embed_dim=dims[i],
                num_heads=heads[i],
                query_head_dim=q_dims[i],
                value_head_dim=v_dims[i],
                pos_head_dim=p_dims[i],
                pos_dim=config.pos_dim,
                feedforward_dim=ff_dims[i],
                cnn_module_kernel=kernels[i],
                causal=config.causal,
                dropout=config.dropout,
                use_regularizers=config.use_regularizers,
            )
            for i in range(num_stacks)
        )
        self.output_downsample = Downsample(self.output_downsampling_factor)

    # -- helpers ------------------------------------------------------------

    @staticmethod
    def output_lengths(feature_lens: Tensor) -> Tensor:
        """25 Hz output lengths: ``((feature_lens - 7) // 2 + 1) // 2``."""
        return _ceil_div(Conv2dSubsampling.output_lengths(feature_lens), 2)

    @staticmethod
    def chunk_feature_frames(chunk_size: int) -> int:
        """Feature frames (100 Hz) a streaming call consumes: ``2 c + 7``."""
        return 2 * chunk_size + Conv2dSubsampling.pad_length

    @staticmethod
    def chunk_shift_frames(chunk_size: int) -> int:
        """Feature frames between the starts of consecutive streaming calls: ``2 c``."""
        return 2 * chunk_size

    def _check_chunk(self, chunk_size: int, left_context_frames: int) -> None:
        if chunk_size > 0 and chunk_size % self.chunk_multiple != 0:
            raise ValueError(
                f"chunk_size {chunk_size} must be a multiple of {self.chunk_multiple}"
            )
        if chunk_size > 0 and left_context_frames > 0 and left_context_frames % chunk_size != 0:
            raise ValueError(
                f"left_context_frames {left_context_frames} must be a multiple of "
                f"chunk_size {chunk_size}"
            )

    def draw_chunk_config(self) -> Tuple[int, int]:
        """Draw (chunk_size, left_context_frames) uniformly from the config
        lists with the torch RNG (so ``torch.manual_seed`` makes it
        reproducible).  Left contexts that are not a multiple of the chunk are
        rounded down to one."""
        i = int(torch.randint(len(self.chunk_sizes), (1,)).item())
        j = int(torch.randint(len(self.left_context_list), (1,)).item())
        chunk, left = self.chunk_sizes[i], self.left_context_list[j]
        if chunk > 0 and left > 0:
            left = (left // chunk) * chunk
        return chunk, left

    def _feature_mask(self, x: Tensor, stack: int) -> Tensor:
        """Training-time masking of the channels above ``encoder_unmasked_dim``."""
        keep = self.unmasked_dims[stack]
        if not self.training or self.config.feature_mask_prob <= 0 or keep >= x.size(-1):
            return x
        n, t, c = x.shape
        frame_keep = (torch.rand(n, t, 1, device=x.device) >= self.config.feature_mask_prob)
        channel_is_masked = torch.arange(c, device=x.device) >= keep
        mask = (~channel_is_masked) | frame_keep
        return x * mask.to(x.dtype)

    def _combine_outputs(self, outputs: List[Tensor]) -> Tensor:
        """The last stack's output, extended to ``output_dim`` channels with the
        extra channels of the most recent stacks wide enough to have them."""
        out = outputs[-1]
        for i in range(len(outputs) - 2, -1, -1):
            width = self.encoder_dims[i]
            if width > out.size(-1):
                out = torch.cat((out, outputs[i][..., out.size(-1) : width]), dim=-1)
        return out

    # -- full-utterance forward --------------------------------------------

    def forward(
        self,
        x: Tensor,
        x_lens: Tensor,
        chunk_size: Optional[int] = None,
        left_context_frames: Optional[int] = None,
    ) -> Tuple[Tensor, Tensor]:
        """
        Args:
          x: (N, T, feature_dim) fbank features at 100 Hz.
          x_lens: (N,) valid frames per utterance.
          chunk_size: attention chunk in 50 Hz frames, -1 = full context.
            ``None``: drawn at random from ``config.chunk_size`` in training
            mode when causal, else -1.
          left_context_frames: visible past frames at 50 Hz (a multiple of
            ``chunk_size``), -1 = unlimited; ``None`` as for ``chunk_size``.
        Returns:
          (out (N, T', output_dim), out_lens (N,)), ``T' = ((T - 7)//2 + 1)//2``;
          frames at or beyond ``out_lens`` are zero.
        """
        if chunk_size is None or left_context_frames is None:
            if self.training and self.config.causal:
                drawn_chunk, drawn_left = self.draw_chunk_config()
            else:
                drawn_chunk, drawn_left = -1, -1
            chunk_size = drawn_chunk if chunk_size is None else chunk_size
            left_context_frames = drawn_left if left_context_frames is None else left_context_frames
        if not self.config.causal and chunk_size > 0:
            raise ValueError("chunked attention needs a causal encoder (config.causal=True)")
        self._check_chunk(chunk_size, left_context_frames)
        self.last_chunk_config = (chunk_size, left_context_frames)
        left_chunks = -1
        if chunk_size > 0 and left_context_frames >= 0:
            left_chunks = left_context_frames // chunk_size

        x, lens = self.encoder_embed(x, x_lens)
        t = x.size(1)
        pad = torch.arange(t, device=x.device).unsqueeze(0) >= lens.unsqueeze(1)
        x = x.masked_fill(pad.unsqueeze(-1), 0.0)
        outputs: List[Tensor] = []
        for i, stack in enumerate(self.stacks):
            x = convert_num_channels(x, self.encoder_dims[i])
            x = self._feature_mask(x, i)
            x = stack(x, lens, chunk_size, left_chunks)
            outputs.append(x)
        out = self.output_downsample(self._combine_outputs(outputs))
        out_lens = _ceil_div(lens, self.output_downsampling_factor)
        out_pad = torch.arange(out.size(1), device=x.device).unsqueeze(0) >= out_lens.unsqueeze(1)
        return out.masked_fill(out_pad.unsqueeze(-1), 0.0), out_lens

    # -- streaming ------------------------------------------------------------

    def get_init_states(
        self,
        batch_size: int = 1,
        chunk_size: int = 16,
        left_context_frames: int = 64,
        device: Optional[torch.device] = None,
    ) -> List[Tensor]:
        """Initial streaming states (all zeros), a flat list of tensors:

        * for each stack, each layer, 6 caches (``L_d = (L // c) * (c // d)``
          frames at the stack's rate ``d``, ``K`` its conv kernel):
          key (N, L_d, H*d_q), non-linear attention (N, L_d, 3C/4),
          value 1 and value 2 (N, L_d, H*d_v), conv 1 and conv 2
          (N, C, (K-1)/2);
        * the front end's ConvNeXt cache (N, 128, 3, 19);
        * ``processed_frames`` (N,) int64: 50 Hz frames consumed so far;
        * ``processed_lens`` (N,) int64: valid 50 Hz frames so far.

        Args:
          batch_size: N.
          chunk_size: c, 50 Hz frames per chunk (multiple of
            :attr:`chunk_multiple`).
          left_context_frames: L >= 0, a multiple of c.
        """
        if not self.config.causal:
            raise ValueError("streaming needs a causal encoder (config.causal=True)")
        if chunk_size <= 0 or left_context_frames < 0:
            raise ValueError("streaming needs chunk_size > 0 and left_context_frames >= 0")
        self._check_chunk(chunk_size, left_context_frames)
        left_chunks = left_context_frames // chunk_size
        states: List[Tensor] = []
        for stack in self.stacks:
            left = left_chunks * (chunk_size // stack.factor)
            for layer in stack.layers:
                for shape in layer.state_shapes(batch_size, left):
                    states.append(torch.zeros(shape, device=device))
        states.append(self.encoder_embed.get_init_cache(batch_size, device=device))
        states.append(torch.zeros(batch_size, dtype=torch.int64, device=device))
        states.append(torch.zeros(batch_size, dtype=torch.int64, device=device))
        return states

    def get_state_names(self) -> List[str]:
        """Names of the tensors of :meth:`get_init_states`, in order (e.g. for
        ONNX input/output names)."""
        kinds = ("cached_key", "cached_nonlin_attn", "cached_val1", "cached_val2",
                 "cached_conv1", "cached_conv2")
        names = [
            f"stack{i}_layer{j}_{kind}"
            for i, stack in enumerate(self.stacks)
            for j in range(len(stack.layers))
            for kind in kinds
        ]
        return names + ["embed_cache", "processed_frames", "processed_lens"]

    def streaming_forward(
        self,
        x: Tensor,
        x_lens: Optional[Tensor],
        states: List[Tensor],
    ) -> Tuple[Tensor, Tensor, List[Tensor]]:
        """Process one chunk.

        Args:
          x: (N, 2 c + 7, feature_dim): feature frames ``2 c k .. 2 c k + 2 c + 6``
            for the k-th call (pad the end of the utterance with anything,
            e.g. zeros).
          x_lens: (N,) valid frames in this window, i.e.
            ``clamp(utterance_len - 2 c k, 0, 2 c + 7)``; ``None`` = all valid.
          states: from :meth:`get_init_states` or the previous call.
        Returns:
          (out (N, c / 2, output_dim), out_lens (N,) valid output frames in
          this chunk, new states).
        """
        n = x.size(0)
        chunk = (x.size(1) - Conv2dSubsampling.pad_length) // 2
        processed_frames, processed_lens = states[-2], states[-1]
        embed_cache = states[-3]
        if x_lens is None:
            valid = torch.full((n,), chunk, dtype=torch.int64, device=x.device)
        else:
            valid = torch.clamp(Conv2dSubsampling.output_lengths(x_lens), max=chunk).to(torch.int64)
        lens = processed_lens + valid

        x, new_embed_cache = self.encoder_embed.streaming_forward(x, embed_cache)
        pos = processed_frames.unsqueeze(1) + torch.arange(chunk, device=x.device).unsqueeze(0)
        x = x.masked_fill((pos >= lens.unsqueeze(1)).unsqueeze(-1), 0.0)

        new_states: List[Tensor] = []
        outputs: List[Tensor] = []
        offset = 0
        for i, stack in enumerate(self.stacks):
            count = len(stack.layers) * _STATES_PER_LAYER
            x = convert_num_channels(x, self.encoder_dims[i])
            x, stack_states = stack.streaming_forward(
                x, processed_frames, lens, states[offset : offset + count]
            )
            offset += count
            new_states.extend(stack_states)
            outputs.append(x)
        out = self.output_downsample(self._combine_outputs(outputs))

        f = self.output_downsampling_factor
        out_start = torch.div(processed_frames, f, rounding_mode="floor")
        out_lens = torch.clamp(_ceil_div(lens, f) - out_start, min=0, max=out.size(1))
        out_pos = torch.arange(out.size(1), device=x.device).unsqueeze(0)
        out = out.masked_fill((out_pos >= out_lens.unsqueeze(1)).unsqueeze(-1), 0.0)

        new_states.append(new_embed_cache)
        new_states.append(processed_frames + chunk)
        new_states.append(lens)
        return out, out_lens, new_states


# ---------------------------------------------------------------------------
# parameter counts


def count_parameters(module: nn.Module) -> int:
    """Number of scalar parameters of ``module``."""
    return sum(p.numel() for p in module.parameters())


def estimate_transducer_parameters(
    encoder_output_dim: int,
    vocab_size: int = 500,
    decoder_dim: int = 512,
    joiner_dim: int = 512,
    context_size: int = 2,
) -> Dict[str, int]:
    """Parameters of a stateless-decoder transducer head on top of the encoder:
    decoder = embedding (vocab x decoder_dim) + grouped Conv1d over
    ``context_size`` tokens (groups = decoder_dim / 4, no bias); joiner =
    encoder_proj, decoder_proj (to joiner_dim) and output (joiner_dim -> vocab)."""
    decoder = vocab_size * decoder_dim + decoder_dim * 4 * context_size
    joiner = (
        encoder_output_dim * joiner_dim + joiner_dim
        + decoder_dim * joiner_dim + joiner_dim
        + joiner_dim * vocab_size + vocab_size
    )
    return {"decoder": decoder, "joiner": joiner}


def _main(argv: Optional[Sequence[str]] = None) -> None:
    parser = argparse.ArgumentParser(description="Print Zipformer encoder parameter counts.")
    parser.add_argument("--config", default="paper", choices=sorted(ENCODER_CONFIGS))
    parser.add_argument(
        "--set", action="append", default=[], metavar="FIELD=VALUE",
        help="override a config field, e.g. --set num_encoder_layers=2,2,2,2,2,2",
    )
    args = parser.parse_args(argv)
    overrides = {}
    field_types = {f.name: f.type for f in dataclasses.fields(EncoderConfig)}
    for item in args.set:
        key, value = item.split("=", 1)
        if key not in field_types:
            parser.error(f"unknown field {key}")
        ftype = str(field_types[key])
        if ftype in ("bool", "<class 'bool'>"):
            overrides[key] = value.lower() in ("1", "true", "yes")
        elif ftype in ("int", "<class 'int'>"):
            overrides[key] = int(value)
        elif ftype in ("float", "<class 'float'>"):
            overrides[key] = float(value)
        else:
            overrides[key] = value
    config = EncoderConfig.from_name(args.config, **overrides)
    encoder = ZipformerEncoder(config)
    n_enc = count_parameters(encoder)
    head = estimate_transducer_parameters(encoder.output_dim)
    total = n_enc + head["decoder"] + head["joiner"]
    print(f"config: {args.config}")
    print(f"encoder output dim: {encoder.output_dim}")
    print(f"encoder parameters: {n_enc:,} ({n_enc / 1e6:.2f}M)")
    print(f"  front end (Conv2dSubsampling): {count_parameters(encoder.encoder_embed):,}")
    for i, stack in enumerate(encoder.stacks):
        print(
            f"  stack {i} (x{stack.factor} downsampling, {len(stack.layers)} layers, "
            f"dim {stack.embed_dim}): {count_parameters(stack):,}"
        )
    print(f"stateless decoder (vocab 500, dim 512, context 2): {head['decoder']:,}")
    print(f"joiner (dim 512, vocab 500): {head['joiner']:,}")
    print(f"estimated transducer total: {total:,} ({total / 1e6:.2f}M)")


if __name__ == "__main__":
    _main()
