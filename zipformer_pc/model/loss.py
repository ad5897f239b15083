"""Transducer losses: k2's pruned RNN-T when k2 imports, torchaudio's full RNN-T otherwise.

* ``pruned`` (k2, what GPU users run): a "simple" loss from linear
  encoder/predictor projections to the vocabulary (``am_scale``/``lm_scale``
  smoothing) gives pruning bounds; the full joiner is then evaluated only on
  ``prune_range`` symbols per frame.  During warm-up the simple loss weight
  falls from 1 to ``simple_loss_scale`` and the pruned loss weight rises from
  0.1 to 1, as in icefall.
  Without k2, ``pruned`` runs the same algorithm written in plain PyTorch
  (:mod:`zipformer_pc.model.pruned_rnnt`).
* ``full`` (torchaudio.functional.rnnt_loss): the exact loss over the whole
  (T, U+1) lattice.  Fine for small vocabularies and the tiny model on CPU.

``auto`` is ``pruned``: k2's when k2 imports, else the plain-PyTorch one.

Both return the loss summed over the utterances of the batch, in float32:
under torch.autocast (``train.py --dtype fp16|bf16``) the projections and
the joiner may run in half precision, but the lattice and its log-softmax are
computed on float32 logits with autocast off.
"""

import logging
from dataclasses import dataclass
from typing import Optional, Tuple

import torch

_K2 = None


def k2_available() -> bool:
    global _K2
    if _K2 is None:
        try:
            import k2  # noqa: F401

            _K2 = True
        except Exception:
            _K2 = False
    return bool(_K2)


def resolve_backend(requested: str = "auto") -> str:
    """``auto`` -> ``pruned`` (k2's when it imports, else the plain-PyTorch one);
    logs the choice.  ``full`` (torchaudio's whole (B, T, U, V) lattice) only when
    asked: at LibriSpeech batch sizes its logits take gigabytes per head."""
    if requested not in ("auto", "pruned", "full"):
        raise ValueError(f"Unknown loss backend {requested!r}: use auto, pruned or full")
    backend = "pruned" if requested == "auto" else requested
    how = {
        "pruned": "k2 pruned RNN-T" if k2_available() else "pruned RNN-T in plain PyTorch (zipformer_pc.model.pruned_rnnt; "
                                                            "k2 does not import)",
        "full": "torchaudio.functional.rnnt_loss, full lattice",
    }[backend]
    logging.info(f"Transducer loss: {backend} ({how})")
    return backend


@dataclass
class LossConfig:
    backend: str = "full"  # pruned | full (resolved)
    prune_range: int = 5
    am_scale: float = 0.0
    lm_scale: float = 0.25
    simple_loss_scale: float = 0.5
    warm_step: int = 2000
    # the plain-PyTorch pruned loss's lattice recursions: float64 or float32 (docs/gpu-check.md)
    lattice_dtype: str = "float64"


def pad_targets(targets, blank_id: int, device) -> Tuple[torch.Tensor, torch.Tensor]:
    """List of token lists -> ((N, U_max) int64 padded with blank, (N,) lengths)."""
    lens = torch.tensor([len(t) for t in targets], dtype=torch.int64)
    u = max(1, int(lens.max())) if len(targets) else 1
    y = torch.full((len(targets), u), blank_id, dtype=torch.int64)
    for i, t in enumerate(targets):
        if len(t):
            y[i, : len(t)] = torch.as_tensor(t, dtype=torch.int64)
    return y.to(device), lens.to(device)


def transducer_loss(
    encoder_out: torch.Tensor,
    encoder_lens: torch.Tensor,
    decoder_out: torch.Tensor,
    joiner,
    y: torch.Tensor,
    y_lens: torch.Tensor,
    cfg: LossConfig,
    blank_id: int = 0,
    simple_am_proj: Optional[torch.nn.Module] = None,
    simple_lm_proj: Optional[torch.nn.Module] = None,
    batch_idx: Optional[int] = None,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Summed loss of a batch and the part to log as "simple" (0 for ``full``).

    Args:
      encoder_out: (N, T, C_enc); encoder_lens: (N,).
      decoder_out: (N, U+1, C_dec), predictor output for ``[blank] + y``.
      y: (N, U) padded targets; y_lens: (N,).
      batch_idx: training batch index for the warm-up ramp (None: no ramp).
    """
    if cfg.backend == "full":
        import torchaudio

        # torchaudio wants the padded sizes to equal the longest lengths
        t_max, u_max = int(encoder_lens.max()), int(y_lens.max())
        encoder_out, decoder_out, y = encoder_out[:, :t_max], decoder_out[:, : u_max + 1], y[:, :u_max]
        logits = joiner(encoder_out.unsqueeze(2), decoder_out.unsqueeze(1))  # (N, T, U+1, V)
        with torch.autocast(device_type=logits.device.type, enabled=False):
            loss = torchaudio.functional.rnnt_loss(
                logits.float(),
                y.int(),
                encoder_lens.int(),
                y_lens.int(),
                blank=blank_id,
                reduction="sum",
            )
        return loss, torch.zeros_like(loss)

    assert simple_am_proj is not None and simple_lm_proj is not None
    if k2_available():
        simple, pruned = _k2_pruned(encoder_out, encoder_lens, decoder_out, joiner, y, y_lens, cfg, blank_id,
                                    simple_am_proj, simple_lm_proj)
    else:
        from zipformer_pc.model.pruned_rnnt import pruned_rnnt_loss

        with torch.autocast(device_type=encoder_out.device.type, enabled=False):
            simple, pruned = pruned_rnnt_loss(
                encoder_out.float(), encoder_lens, decoder_out.float(), joiner, simple_am_proj, simple_lm_proj,
                y, y_lens,
                blank_id=blank_id, prune_range=cfg.prune_range, lm_scale=cfg.lm_scale, am_scale=cfg.am_scale,
                lattice_dtype=getattr(torch, cfg.lattice_dtype),
            )
    s, p = cfg.simple_loss_scale, 1.0
    if batch_idx is not None and batch_idx < cfg.warm_step:
        frac = batch_idx / cfg.warm_step
        s = 1.0 - frac * (1.0 - cfg.simple_loss_scale)
        p = 0.1 + 0.9 * frac
    return s * simple + p * pruned, simple.detach()


def _k2_pruned(encoder_out, encoder_lens, decoder_out, joiner, y, y_lens, cfg, blank_id, simple_am_proj,
               simple_lm_proj) -> Tuple[torch.Tensor, torch.Tensor]:
    """(simple, pruned) losses summed over the batch, by k2."""
    import k2

    boundary = torch.zeros((y.size(0), 4), dtype=torch.int64, device=y.device)
    boundary[:, 2] = y_lens
    boundary[:, 3] = encoder_lens
    lm = simple_lm_proj(decoder_out)
    am = simple_am_proj(encoder_out)
    with torch.autocast(device_type=lm.device.type, enabled=False):
        simple, (px_grad, py_grad) = k2.rnnt_loss_smoothed(
            lm=lm.float(), am=am.float(), symbols=y, termination_symbol=blank_id,
            lm_only_scale=cfg.lm_scale, am_only_scale=cfg.am_scale, boundary=boundary,
            reduction="sum", return_grad=True,
        )
    ranges = k2.get_rnnt_prune_ranges(px_grad=px_grad, py_grad=py_grad, boundary=boundary, s_range=cfg.prune_range)
    am_pruned, lm_pruned = k2.do_rnnt_pruning(
        am=joiner.encoder_proj(encoder_out), lm=joiner.decoder_proj(decoder_out), ranges=ranges
    )
    logits = joiner(am_pruned, lm_pruned, project_input=False)
    with torch.autocast(device_type=lm.device.type, enabled=False):
        pruned = k2.rnnt_loss_pruned(
            logits=logits.float(), symbols=y, ranges=ranges, termination_symbol=blank_id,
            boundary=boundary, reduction="sum",
        )
    return simple, pruned
