"""Random models that emit like trained ones, exported, and a speech-like test
signal: for the speed benchmarks (``benchmarks/sherpa_vs_ours.py``,
``benchmarks/server_load.py``) and the runtime tests, which need a model whose
greedy search emits varied tokens at a realistic rate without training one.

A random joiner would emit a token on nearly every frame, which a trained
model never does, and greedy search's cost depends on that;
:func:`emit_like_a_trained_model` replaces each joiner's output layer so
that greedy search emits on a chosen fraction of the encoder frames.
"""

from pathlib import Path
from typing import Tuple

import numpy as np

from zipformer_pc.layout import DEFAULT_CHUNK_SIZE, DEFAULT_LEFT_CONTEXT_FRAMES

RATE = 16000


def synthetic_utterance(seconds: float, seed: int, rate: int = RATE) -> np.ndarray:
    """A speech-like test signal: 0.3 s of silence, then a harmonic tone whose
    pitch drifts, amplitude-modulated at a syllable rate, with a little noise."""
    rng = np.random.default_rng(seed)
    n = int(seconds * rate)
    lead = min(n, int(0.3 * rate))
    t = np.arange(n - lead) / rate
    f0 = 110 + 40 * np.sin(2 * np.pi * rng.uniform(0.2, 0.5) * t + rng.uniform(0, 2 * np.pi))
    phase = 2 * np.pi * np.cumsum(f0) / rate
    voiced = sum((0.6 / k) * np.sin(k * phase + rng.uniform(0, 2 * np.pi)) for k in range(1, 12))
    syllables = 0.5 * (1 + np.sin(2 * np.pi * rng.uniform(3.0, 5.0) * t)) ** 2
    x = 0.15 * voiced * syllables + 0.01 * rng.standard_normal(t.size)
    return np.concatenate([np.zeros(lead), x]).astype(np.float32)



def write_tokens(path: Path, vocab_size: int) -> None:
    """``<blk> <sos/eos> <unk>``, three marks, then word-start, capitalised and inner pieces."""
    names = ["<blk>", "<sos/eos>", "<unk>", ".", ",", "?"]
    kinds = ("\u2581w{}", "\u2581W{}", "x{}")
    names += [kinds[i % 3].format(i) for i in range(vocab_size - len(names))]
    path.write_text("".join(f"{t} {i}\n" for i, t in enumerate(names)), encoding="utf-8")



def emit_like_a_trained_model(model, samples: np.ndarray, fraction: float, seed: int = 0) -> None:
    """Replace every joiner's output layer (in place) so that greedy search on
    ``samples`` emits a token on about ``fraction`` of the encoder frames.

    The new layer scores each non-blank token by a seeded random projection of
    the joiner's hidden vector minus its mean over ``samples`` (so the winner
    changes from frame to frame); blank gets a constant logit, the
    ``1 - fraction`` quantile over frames of the best non-blank score (with the
    predictor in its start state).  ``<sos/eos>`` and ``<unk>`` never win.
    """
    import torch

    from zipformer_pc.modes import MODE_P
    from zipformer_pc.features import knf_fbank

    if not 0.0 < fraction < 1.0:
        raise ValueError(f"the emitting fraction must be in (0, 1), got {fraction}")
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        feats = torch.from_numpy(knf_fbank(samples)).unsqueeze(0)
        enc, _ = model.encoder(feats, torch.tensor([feats.size(1)]))
        start = torch.zeros(1, model.cfg.context_size, dtype=torch.long)
        for name, joiner in model.joiners.items():
            decoder = model.decoders[name]
            dec = decoder(start, mode=MODE_P if decoder.conditioned else None, need_pad=False)[:, -1]
            hidden = torch.tanh(joiner.encoder_proj(enc[0]) + joiner.decoder_proj(dec))  # (T, J)
            mean = hidden.mean(dim=0)
            spread = float((hidden - mean).norm(dim=1).mean()) or 1.0
            vocab, dim = joiner.output_linear.weight.shape
            weight = torch.randn(vocab, dim, generator=g) / spread
            weight[:3] = 0.0  # blank, <sos/eos>, <unk>: constant logits
            bias = -weight @ mean
            bias[1:3] = -1e4
            best = (hidden @ weight.t() + bias)[:, 3:].max(dim=1).values
            bias[0] = float(torch.quantile(best, 1.0 - fraction))
            joiner.output_linear.weight.copy_(weight)
            joiner.output_linear.bias.copy_(bias)



def build_random_export(out_dir: Path, calibration: np.ndarray, encoder: str = "tiny",
                        model_type: str = "conditioned", vocab_size: int = 500, seed: int = 0,
                        emit_fraction: float = 0.15, chunk_size: int = DEFAULT_CHUNK_SIZE,
                        left_context_frames: int = DEFAULT_LEFT_CONTEXT_FRAMES,
                        int8: bool = True, **head) -> Tuple[str, int]:
    """Export a random model (fp32, and int8 with ``int8``) to ``out_dir``, its joiners
    calibrated on ``calibration`` audio; returns its description and parameter count.
    ``head``: more :class:`HeadConfig` fields (e.g. ``decoder_dim``)."""
    import torch

    from zipformer_pc.export.onnx_export import export_model
    from zipformer_pc.model.transducer import HeadConfig, build_model, make_model_config

    torch.manual_seed(seed)
    model = build_model(make_model_config(encoder, {}, HeadConfig(model_type=model_type, vocab_size=vocab_size,
                                                                  **head))).eval()
    params = sum(p.numel() for p in model.parameters())
    emit_like_a_trained_model(model, calibration, emit_fraction, seed)
    out_dir.mkdir(parents=True, exist_ok=True)
    tokens = out_dir / "tokens.in.txt"
    write_tokens(tokens, vocab_size)
    export_model(model, out_dir, tokens, chunk_size, left_context_frames, int8=int8,
                 desc=f"random, {encoder} encoder")
    tokens.unlink()
    return f"random {model_type}, {encoder} encoder", params
