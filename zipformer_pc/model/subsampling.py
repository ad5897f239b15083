"""Convolutional front end of the Zipformer encoder (100 Hz fbank -> ~50 Hz).

Layout (time axis T, frequency axis F = 80 for fbank features):

1. ``Conv2d(1 -> c1, 3x3, pad freq 1)`` + SwooshR     T -> T - 2
2. ``Conv2d(c1 -> c2, 3x3, stride 2)`` + SwooshR      T -> (T - 5) // 2 + 1
3. ``Conv2d(c2 -> c3, 3x3, stride (1, 2))`` + SwooshR T -> ... - 2 = (T - 7) // 2
4. a ConvNeXt-style residual block (depthwise 4x7 (time x frequency)
   conv, point-wise expansion, SwooshL, point-wise projection) at the ~50 Hz
   rate.  Its time kernel is *causal*: it looks 3 frames back and none ahead,
   so the block never adds look-ahead; in streaming those 3 frames are an
   explicit cache of shape (N, 128, 3, 19), the front-end state sherpa-onnx
   allocates for a streaming Zipformer2.
5. flatten (channels x frequency) -> ``Linear`` -> :class:`BiasNorm`.

None of the time convolutions in steps 1-3 pad the time axis, so the output
frame ``t`` (at 50 Hz) depends on exactly the input frames ``2t .. 2t + 8``
(plus, through step 4, on earlier frames).  Consequently:

* full utterance: ``T_in`` frames give ``(T_in - 7) // 2`` output frames;
* streaming: to emit ``n`` output frames one feeds ``2 n + 7`` feature frames
  and then advances the feature pointer by ``2 n`` (consecutive windows
  overlap by 7 frames, the front end's right look-ahead ``pad_length``).
"""

from __future__ import annotations

from typing import Tuple

import torch
import torch.nn as nn
from torch import Tensor

from .scaling import BiasNorm, SharedDropout, SwooshL, SwooshR

__all__ = ["Conv2dSubsampling", "ConvNeXt"]


class ConvNeXt(nn.Module):
    """ConvNeXt-style residual block acting on (N, C, T, F) feature maps.

    The depthwise convolution is causal in time (``time_kernel - 1`` frames
    of left context, no look-ahead) and centred in frequency.

    Args:
      channels: number of channels C.
      hidden_ratio: expansion of the point-wise MLP.
      time_kernel: depthwise kernel length in time (``time_kernel - 1``
        cached frames in streaming).
      freq_kernel: depthwise kernel size in frequency (odd).
    """

    #: default depthwise kernel length in time (the streaming cache holds ``time_kernel - 1`` frames)
    time_kernel: int = 4

    def __init__(
        self,
        channels: int,
        hidden_ratio: int = 3,
        time_kernel: int = time_kernel,
        freq_kernel: int = 7,
    ) -> None:
        super().__init__()
        assert freq_kernel % 2 == 1
        self.left_context = time_kernel - 1
        self.depthwise = nn.Conv2d(
            channels,
            channels,
            kernel_size=(time_kernel, freq_kernel),
            padding=(0, freq_kernel // 2),
            groups=channels,
        )
        self.pointwise1 = nn.Conv2d(channels, hidden_ratio * channels, kernel_size=1)
        self.activation = SwooshL()
        self.pointwise2 = nn.Conv2d(hidden_ratio * channels, channels, kernel_size=1)
        with torch.no_grad():
            # start close to the identity
            self.pointwise2.weight.mul_(0.1)
            self.pointwise2.bias.mul_(0.1)

    def _block(self, x_with_context: Tensor) -> Tensor:
        y = self.depthwise(x_with_context)
        y = self.pointwise1(y)
        y = self.activation(y)
        return self.pointwise2(y)

    def forward(self, x: Tensor) -> Tensor:
        """Full-sequence forward with zero left padding.

        Args:
          x: (N, C, T, F)
        Returns:
          (N, C, T, F)
        """
        x_padded = nn.functional.pad(x, (0, 0, self.left_context, 0))
        return x + self._block(x_padded)

    def streaming_forward(self, x: Tensor, cache: Tensor) -> Tuple[Tensor, Tensor]:
        """Chunk forward.

        Args:
          x: (N, C, T_chunk, F) new frames.
          cache: (N, C, left_context, F) the previous frames (zeros at start).
        Returns:
          (output (N, C, T_chunk, F), new cache (N, C, left_context, F)).
        """
        x_with_context = torch.cat((cache, x), dim=2)
        new_cache = x_with_context[:, :, x_with_context.size(2) - self.left_context :, :]
        return x + self._block(x_with_context), new_cache


class Conv2dSubsampling(nn.Module):
    """Conv2d front end: (N, T, F_in) at 100 Hz -> (N, (T - 7) // 2, C_out) at 50 Hz.

    Args:
      in_channels: number of input features per frame (80 for fbank).
      out_channels: encoder width of the first Zipformer stack.
      layer1_channels, layer2_channels, layer3_channels: conv channel counts
        (``layer3_channels`` other than 128 only without the ConvNeXt block:
        streaming runtimes such as sherpa-onnx allocate its cache with 128).
      dropout: dropout applied to the output.
      convnext_hidden_ratio: expansion of the ConvNeXt block's point-wise MLP
        (0: no ConvNeXt block; measured to be ~2/3 of the front end's and a
        third of the tiny model's training step on a CPU).
    """

    #: number of extra (look-ahead) feature frames a streaming chunk needs
    pad_length: int = 7
    #: channels of the streaming ConvNeXt cache (sherpa-onnx allocates it so)
    cache_channels: int = 128

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        layer1_channels: int = 8,
        layer2_channels: int = 32,
        layer3_channels: int = 128,
        dropout: float = 0.1,
        convnext_hidden_ratio: int = 3,
    ) -> None:
        super().__init__()
        assert in_channels >= 9, in_channels
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.conv = nn.Sequential(
            nn.Conv2d(1, layer1_channels, kernel_size=3, padding=(0, 1)),
            SwooshR(),
            nn.Conv2d(layer1_channels, layer2_channels, kernel_size=3, stride=2),
            SwooshR(),
            nn.Conv2d(layer2_channels, layer3_channels, kernel_size=3, stride=(1, 2)),
            SwooshR(),
        )
        if convnext_hidden_ratio < 0:
            raise ValueError(f"convnext_hidden_ratio must be >= 0, got {convnext_hidden_ratio}")
        if convnext_hidden_ratio and layer3_channels != self.cache_channels:
            raise ValueError(
                f"a front end of {layer3_channels} channels with a ConvNeXt block (convnext_hidden_ratio "
                f"{convnext_hidden_ratio}): the block's streaming cache must have {self.cache_channels} channels "
                f"(sherpa-onnx's layout); use convnext_hidden_ratio 0 or {self.cache_channels} channels"
            )
        # 0: no ConvNeXt block.  Its cache stays in the streaming state (passed
        # through unchanged), so the state layout sherpa-onnx allocates holds.
        self.convnext = ConvNeXt(layer3_channels, hidden_ratio=convnext_hidden_ratio) if convnext_hidden_ratio else None
        self.layer3_channels = layer3_channels
        self.out_width = (((in_channels - 1) // 2) - 1) // 2
        self.out = nn.Linear(layer3_channels * self.out_width, out_channels)
        self.out_norm = BiasNorm(out_channels)
        self.dropout = SharedDropout(dropout)

    @staticmethod
    def output_lengths(x_lens: Tensor) -> Tensor:
        """Number of 50 Hz frames for ``x_lens`` input frames: ``(x_lens - 7) // 2``
        (clamped at zero)."""
        return torch.clamp(torch.div(x_lens - 7, 2, rounding_mode="floor"), min=0)

    def _project(self, x: Tensor) -> Tensor:
        # (N, C, T, F) -> (N, T, C * F) -> (N, T, out_channels)
        n, c, t, f = x.shape
        x = x.permute(0, 2, 1, 3).reshape(n, t, c * f)
        x = self.out_norm(self.out(x))
        return self.dropout(x)

    def forward(self, x: Tensor, x_lens: Tensor) -> Tuple[Tensor, Tensor]:
        """
        Args:
          x: (N, T, F_in) features.
          x_lens: (N,) number of valid frames of each utterance.
        Returns:
          (output (N, (T - 7) // 2, C_out), output lengths (N,)).
        """
        y = self.conv(x.unsqueeze(1))  # (N, C3, T', F')
        if self.convnext is not None:
            y = self.convnext(y)
        return self._project(y), self.output_lengths(x_lens)

    def get_init_cache(self, batch_size: int, device=None, dtype=torch.float32) -> Tensor:
        """Zero ConvNeXt cache of shape (N, 128, 3, out_width) (without the
        ConvNeXt block a placeholder that is passed through unchanged)."""
        return torch.zeros(
            batch_size,
            self.cache_channels,
            ConvNeXt.time_kernel - 1 if self.convnext is None else self.convnext.left_context,
            self.out_width,
            device=device,
            dtype=dtype,
        )

    def streaming_forward(self, x: Tensor, cache: Tensor) -> Tuple[Tensor, Tensor]:
        """
        Args:
          x: (N, 2 n + 7, F_in) feature window; consecutive windows overlap
            by :attr:`pad_length` = 7 frames.
          cache: (N, 128, 3, out_width) ConvNeXt cache.
        Returns:
          (output (N, n, C_out), new cache).
        """
        y = self.conv(x.unsqueeze(1))
        if self.convnext is None:
            return self._project(y), cache
        y, new_cache = self.convnext.streaming_forward(y, cache)
        return self._project(y), new_cache
