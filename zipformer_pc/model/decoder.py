"""Stateless transducer predictor, optionally conditioned on the output mode.

The predictor sees only the last ``context_size`` tokens: an embedding
followed by a 1-D convolution over that context (no recurrence), as in the
pruned stateless transducer.

Mode conditioning (Cui et al. 2023, Fig. 1 d): with ``mode_dim > 0`` each
token embedding (``decoder_dim - mode_dim`` dims, 500 in the paper) is
concatenated with a learned embedding of the requested output mode
(``mode_dim`` dims, 12 in the paper) before the context convolution, so one
predictor and one joiner produce either transcript.  Both mode vectors are
trainable parameters initialised like the token embeddings (the paper's code
left the normalized one frozen at zero).
"""

from typing import Optional, Union

import torch
import torch.nn as nn
import torch.nn.functional as F


class Decoder(nn.Module):
    """Stateless predictor.

    Args:
      vocab_size: number of tokens (blank included).
      decoder_dim: output dimension.
      blank_id: the blank token; it is also the "no previous token" padding.
      context_size: number of previous tokens seen (1 = bigram-free, 2 = default).
      mode_dim: dimension of the mode embedding (0: not conditioned).
      num_modes: number of output modes when conditioned.
      embed_std: standard deviation of the initial token and mode embeddings
        (1.0 as icefall's ``nn.Embedding``; ``None``: ``(decoder_dim -
        mode_dim) ** -0.5``, this project's first choice, which makes the
        predictor's contribution to the joiner ~30x smaller than the
        encoder's at the start of training).
    """

    def __init__(
        self,
        vocab_size: int,
        decoder_dim: int,
        blank_id: int = 0,
        context_size: int = 2,
        mode_dim: int = 0,
        num_modes: int = 2,
        embed_std: Optional[float] = None,
    ) -> None:
        super().__init__()
        if context_size < 1:
            raise ValueError(f"context_size must be >= 1, got {context_size}")
        if not 0 <= mode_dim < decoder_dim:
            raise ValueError(f"mode_dim must be in [0, decoder_dim), got {mode_dim}")
        self.vocab_size = vocab_size
        self.decoder_dim = decoder_dim
        self.blank_id = blank_id
        self.context_size = context_size
        self.mode_dim = mode_dim
        std = (decoder_dim - mode_dim) ** -0.5 if embed_std is None else embed_std
        self.embedding = nn.Embedding(vocab_size, decoder_dim - mode_dim)
        nn.init.normal_(self.embedding.weight, std=std)
        with torch.no_grad():
            self.embedding.weight[blank_id].zero_()  # never used: blank embeds to zeros
        if mode_dim > 0:
            self.mode_embedding = nn.Embedding(num_modes, mode_dim)
            nn.init.normal_(self.mode_embedding.weight, std=std)
        else:
            self.mode_embedding = None
        if context_size > 1:
            self.conv = nn.Conv1d(
                decoder_dim, decoder_dim, kernel_size=context_size, groups=decoder_dim // 4, bias=False
            )
        else:
            self.conv = None

    @property
    def conditioned(self) -> bool:
        return self.mode_embedding is not None

    def forward(
        self, y: torch.Tensor, mode: Union[int, torch.Tensor, None] = None, need_pad: bool = True
    ) -> torch.Tensor:
        """
        Args:
          y: (N, U) token ids; blank and negative ids (padding) embed to zeros
            (as icefall's ``padding_idx=blank``), so every way of starting the
            context is the same: ``[blank] * context_size`` (our search and
            runtime), ``[-1, ..., -1, blank]`` (sherpa-onnx's greedy search)
            and the training pad.
          mode: output mode per utterance, (N,) or an int (conditioned only).
          need_pad: True in training: ``y`` is left-padded with
            ``context_size - 1`` blanks, so output u depends on tokens < u
            and the first output sees the starting context of decoding (for
            the conditioned predictor with its mode).  False in decoding,
            where ``y`` already holds exactly ``context_size`` tokens per row.
        Returns:
          (N, U, decoder_dim), or (N, U - context_size + 1, decoder_dim) with
          ``need_pad=False``.
        """
        if need_pad and self.context_size > 1:
            y = F.pad(y, (self.context_size - 1, 0), value=self.blank_id)
        # Blank and padding are zero vectors whatever the weights hold (the
        # blank row of checkpoints written before this rule included).
        keep = (y >= 0) & (y != self.blank_id)
        emb = self.embedding(y.clamp(min=0)) * keep.unsqueeze(-1).to(self.embedding.weight.dtype)
        if self.mode_embedding is not None:
            if mode is None:
                raise ValueError("A conditioned decoder needs the output mode")
            if not torch.is_tensor(mode):
                mode = torch.full((y.size(0),), int(mode), dtype=torch.long, device=y.device)
            m = self.mode_embedding(mode).unsqueeze(1).expand(-1, y.size(1), -1)
            emb = torch.cat([emb, m], dim=-1)
        elif mode is not None and torch.is_tensor(mode) and mode.dim() > 1:
            raise ValueError("mode must be an int or a (N,) tensor")
        if self.conv is not None:
            x = self.conv(emb.permute(0, 2, 1)).permute(0, 2, 1)
        else:
            x = emb
        return F.relu(x)
