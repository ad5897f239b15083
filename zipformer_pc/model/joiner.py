"""Transducer joiner: combines encoder and predictor outputs into token logits."""

import torch
import torch.nn as nn


class Joiner(nn.Module):
    """``logits = output_linear(tanh(encoder_proj(enc) + decoder_proj(dec)))``.

    The projections are separate so decoding (and the ONNX export) can apply
    them once per frame / per token instead of once per (frame, token) pair.
    """

    def __init__(self, encoder_dim: int, decoder_dim: int, joiner_dim: int, vocab_size: int) -> None:
        super().__init__()
        self.encoder_proj = nn.Linear(encoder_dim, joiner_dim)
        self.decoder_proj = nn.Linear(decoder_dim, joiner_dim)
        self.output_linear = nn.Linear(joiner_dim, vocab_size)

    def forward(self, encoder_out: torch.Tensor, decoder_out: torch.Tensor, project_input: bool = True) -> torch.Tensor:
        """
        Args:
          encoder_out: (N, T, s_range, C_enc) or (N, T, 1, C_enc) or (N, C_enc).
          decoder_out: broadcastable to encoder_out, last dim C_dec.
          project_input: False when both inputs are already projected to joiner_dim.
        Returns:
          logits with the broadcast shape and last dim vocab_size.
        """
        if project_input:
            encoder_out = self.encoder_proj(encoder_out)
            decoder_out = self.decoder_proj(decoder_out)
        return self.output_linear(torch.tanh(encoder_out + decoder_out))
