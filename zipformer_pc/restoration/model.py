"""The restoration model, its checkpoints and its torch inference.

Encoder: pieces between ``<s>`` and ``</s>``, sinusoidal positions, pre-norm
layers of self-attention, a depthwise-convolution module (Conformer style;
the local context punctuation depends on, which attention alone learned
poorly from the ~1k lines of the synthetic corpus) and a feed-forward
block, then two linear heads (case, punctuation).  It is bidirectional: a
restorer of whole hypotheses, not a streaming one.

    >>> r = Restorer.from_checkpoint("egs/synth/exp/restore_default/best-valid-loss.pt")
    >>> r.restore(["why does not perry see her"])
    ['Why does not Perry see her?']

A checkpoint holds the weights, the model and label config, the mixed-case
lexicon and the sentencepiece model, so it reloads alone.
"""

import math
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Dict, Mapping, Optional, Tuple

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from zipformer_pc.runtime.restoration import CASE_CLASSES, BaseRestorer, OnnxRestorer, punct_classes
from zipformer_pc.text import PunctConfig

DEFAULT_MAX_WORDS = 200


@dataclass
class RestorationConfig:
    """Sizes of :class:`RestorationModel` (the defaults give 2.43M parameters with 1000 pieces)."""

    vocab_size: int
    num_punct: int = 4
    num_case: int = len(CASE_CLASSES)
    d_model: int = 192
    num_layers: int = 4
    num_heads: int = 4
    ff_dim: int = 768
    kernel_size: int = 7
    dropout: float = 0.1

    def __post_init__(self) -> None:
        if self.d_model % self.num_heads:
            raise ValueError(f"d_model ({self.d_model}) must be a multiple of num_heads ({self.num_heads})")
        if self.kernel_size % 2 == 0:
            raise ValueError(f"kernel_size must be odd, got {self.kernel_size}")
        if self.d_model % 2:
            raise ValueError(f"d_model must be even (sinusoidal positions), got {self.d_model}")


def sinusoidal_positions(length: int, dim: int, device: torch.device) -> torch.Tensor:
    """``(length, dim)`` sine/cosine position encodings (Vaswani et al.), computed for any length."""
    pos = torch.arange(length, device=device, dtype=torch.float32).unsqueeze(1)
    freq = torch.exp(torch.arange(0, dim, 2, device=device, dtype=torch.float32) * (-math.log(10000.0) / dim))
    angles = pos * freq
    return torch.stack([angles.sin(), angles.cos()], dim=-1).reshape(length, dim)


class RestorationAttention(nn.Module):
    """Multi-head self-attention with a key padding mask, written with plain ops (clean ONNX)."""

    def __init__(self, d_model: int, num_heads: int, dropout: float) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = d_model // num_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, key_pad: torch.Tensor) -> torch.Tensor:
        """x: (B, T, D); key_pad: (B, T) bool, True at padding."""
        b, t, d = x.shape
        qkv = self.qkv(x).reshape(b, t, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]  # (B, H, T, head_dim)
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim)  # (B, H, T, T)
        scores = scores.masked_fill(key_pad[:, None, None, :], -1e9)
        attn = self.dropout(scores.softmax(dim=-1))
        y = torch.matmul(attn, v).transpose(1, 2).reshape(b, t, d)
        return self.out(y)


class RestorationConvModule(nn.Module):
    """Local context (Conformer style): pointwise GLU, depthwise convolution, pointwise.

    Padding frames are zeroed before the convolution, so the output at real
    positions does not depend on how much padding a batch has.
    """

    def __init__(self, d_model: int, kernel_size: int) -> None:
        super().__init__()
        self.pointwise_in = nn.Linear(d_model, 2 * d_model)
        self.depthwise = nn.Conv1d(d_model, d_model, kernel_size, padding=kernel_size // 2, groups=d_model)
        self.pointwise_out = nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor, key_pad: torch.Tensor) -> torch.Tensor:
        x = F.glu(self.pointwise_in(x), dim=-1).masked_fill(key_pad[:, :, None], 0.0)
        x = F.gelu(self.depthwise(x.transpose(1, 2))).transpose(1, 2)
        return self.pointwise_out(x)


class RestorationLayer(nn.Module):
    """Pre-norm transformer layer: self-attention, a convolution module and a GELU feed-forward block."""

    def __init__(self, cfg: RestorationConfig) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(cfg.d_model)
        self.attn = RestorationAttention(cfg.d_model, cfg.num_heads, cfg.dropout)
        self.norm_conv = nn.LayerNorm(cfg.d_model)
        self.conv = RestorationConvModule(cfg.d_model, cfg.kernel_size)
        self.norm2 = nn.LayerNorm(cfg.d_model)
        self.ff = nn.Sequential(
            nn.Linear(cfg.d_model, cfg.ff_dim),
            nn.GELU(),
            nn.Dropout(cfg.dropout),
            nn.Linear(cfg.ff_dim, cfg.d_model),
        )
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor, key_pad: torch.Tensor) -> torch.Tensor:
        x = x + self.dropout(self.attn(self.norm1(x), key_pad))
        x = x + self.dropout(self.conv(self.norm_conv(x), key_pad))
        return x + self.dropout(self.ff(self.norm2(x)))


class RestorationModel(nn.Module):
    """Shared transformer encoder over pieces with a case head and a punctuation head."""

    def __init__(self, cfg: RestorationConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        # std d^-0.5, so the embeddings scaled by sqrt(d) in forward() match the unit-scale positions.
        nn.init.normal_(self.embed.weight, std=cfg.d_model**-0.5)
        self.layers = nn.ModuleList(RestorationLayer(cfg) for _ in range(cfg.num_layers))
        self.norm = nn.LayerNorm(cfg.d_model)
        self.dropout = nn.Dropout(cfg.dropout)
        self.case_head = nn.Linear(cfg.d_model, cfg.num_case)
        self.punct_head = nn.Linear(cfg.d_model, cfg.num_punct)

    def forward(self, tokens: torch.Tensor, lengths: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """tokens: (B, T) int64, lengths: (B,) int64 -> per-piece (B, T, num_case), (B, T, num_punct) logits."""
        t = tokens.size(1)
        key_pad = torch.arange(t, device=tokens.device)[None, :] >= lengths[:, None]
        x = self.embed(tokens) * math.sqrt(self.cfg.d_model)
        x = self.dropout(x + sinusoidal_positions(t, self.cfg.d_model, tokens.device))
        for layer in self.layers:
            x = layer(x, key_pad)
        x = self.norm(x)
        return self.case_head(x), self.punct_head(x)


def num_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def make_meta(config: PunctConfig, mix_lexicon: Mapping[str, str], max_words: int = DEFAULT_MAX_WORDS) -> Dict[str, object]:
    """The label/text config stored with the weights (checkpoint and ONNX metadata)."""
    return {
        "case_classes": list(CASE_CLASSES),
        "punct_classes": list(punct_classes(config)),
        "punct_keep": list(config.keep),
        "punct_map": dict(config.mapping),
        "mix_lexicon": dict(mix_lexicon),
        "max_words": max_words,
    }


def save_restoration_checkpoint(path: Path, model: RestorationModel, spm_model: bytes, meta: Mapping[str, object],
                    info: Mapping[str, object]) -> None:
    """Atomically write weights, configs and the sentencepiece model (a checkpoint alone reloads)."""
    tmp = path.with_name(path.name + ".tmp")
    torch.save(
        {"model": model.state_dict(), "model_config": asdict(model.cfg), "meta": dict(meta),
         "spm_model": spm_model, "info": dict(info)},
        tmp,
    )
    os.replace(tmp, path)


def load_restoration_checkpoint(path: str) -> Tuple[RestorationModel, bytes, Dict[str, object], Dict[str, object]]:
    """``(model in eval mode, sentencepiece model, meta, info)`` of a checkpoint."""
    ckpt = torch.load(path, map_location="cpu", weights_only=True)
    for key in ("model", "model_config", "meta", "spm_model"):
        if key not in ckpt:
            raise ValueError(f"{path}: not a restoration checkpoint (no {key!r})")
    model = RestorationModel(RestorationConfig(**ckpt["model_config"]))
    model.load_state_dict(ckpt["model"])
    model.eval()
    return model, ckpt["spm_model"], ckpt["meta"], ckpt.get("info", {})


class Restorer(BaseRestorer):
    """The torch model behind :meth:`BaseRestorer.restore` (same API as :class:`OnnxRestorer`)."""

    def __init__(self, model: RestorationModel, spm_model: bytes, meta: Mapping[str, object]) -> None:
        super().__init__(spm_model, meta)
        if self.encoder.vocab_size != model.cfg.vocab_size:
            raise ValueError(f"Tokenizer has {self.encoder.vocab_size} pieces, model {model.cfg.vocab_size}")
        self.model = model

    @classmethod
    def from_checkpoint(cls, path: str) -> "Restorer":
        model, spm_model, meta, _ = load_restoration_checkpoint(path)
        return cls(model, spm_model, meta)

    def logits(self, tokens: np.ndarray, lengths: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
        was_training = self.model.training
        self.model.eval()
        with torch.no_grad():
            case, punct = self.model(torch.from_numpy(tokens), torch.from_numpy(lengths))
        self.model.train(was_training)
        return case.numpy(), punct.numpy()


def load_restorer(checkpoint: Optional[str] = None, onnx: Optional[str] = None, num_threads: int = 1) -> BaseRestorer:
    """A :class:`Restorer` from a checkpoint or an :class:`OnnxRestorer` from an export (exactly one)."""
    if (checkpoint is None) == (onnx is None):
        raise ValueError("Give exactly one of a checkpoint and an ONNX file")
    if onnx is not None:
        return OnnxRestorer(onnx, num_threads=num_threads)
    torch.set_num_threads(num_threads)
    return Restorer.from_checkpoint(checkpoint)  # type: ignore[arg-type]
