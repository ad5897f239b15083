"""The joint punctuated / normalized transducer and its four model types.

``--model-type``:

* ``punct``: one predictor+joiner trained on P; its N output is P passed
  through the shared normalization (zipformer_pc.text.normalized).
* ``norm``: one predictor+joiner trained on N (the cascade's ASR).
* ``two-decoder``: two predictor+joiner pairs on one encoder, one per mode
  (Cui et al. Fig. 1 b).
* ``conditioned``: one predictor whose token embedding is concatenated with
  a learned mode embedding, and one joiner (Fig. 1 c/d).

Loss (eq. 5 of the paper): ``L = (1 - alpha) * L_N + alpha * L_P`` where each
term is the summed transducer loss of the utterances that have that
reference divided by their number, so each term is a per-utterance mean and
stays defined when a batch has no P utterance (the term is then absent, not
NaN).  ``punct`` and ``norm`` use their single term.
"""

from dataclasses import asdict, dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn as nn

from zipformer_pc.model.decoder import Decoder
from zipformer_pc.model.joiner import Joiner
from zipformer_pc.model.loss import LossConfig, pad_targets, transducer_loss
from zipformer_pc.model.zipformer import add_tail_silence
from zipformer_pc.modes import MODE_N, MODE_NAMES, MODE_P, MODEL_TYPES, searched_modes


#: predictor / joiner width that goes with each encoder preset (``--decoder-dim`` / ``--joiner-dim`` default)
HEAD_DIMS: Dict[str, int] = {"paper": 512, "tiny": 256}


def head_dim(encoder: str) -> int:
    """Default predictor and joiner width for an encoder preset (512 for any other)."""
    return HEAD_DIMS.get(encoder, 512)

#: references of the auxiliary CTC loss (``Transducer.forward``'s ``ctc_targets``)
CTC_TARGETS = ("auto", "N", "P")

#: classes of the auxiliary sentence-end loss (``--sentence-end-loss-scale``): the mark
#: that ends an utterance's P reference
SENTENCE_END_MARKS = (".", "?")
#: encoder output frames (25 Hz) at an utterance's end that the sentence-end loss classifies
SENTENCE_END_FRAMES = 16


def sentence_end_classes(texts_p: Sequence[Optional[str]]) -> torch.Tensor:
    """Class of each utterance for the sentence-end loss: the index in
    :data:`SENTENCE_END_MARKS` of the mark its P reference ends with, -1 when it
    has no P reference or ends otherwise (e.g. with a comma: cut mid-sentence)."""
    ends = [(t.rstrip()[-1:] if t else "") for t in texts_p]
    return torch.tensor([SENTENCE_END_MARKS.index(e) if e in SENTENCE_END_MARKS else -1 for e in ends],
                        dtype=torch.long)


@dataclass
class HeadConfig:
    model_type: str = "conditioned"
    vocab_size: int = 500
    blank_id: int = 0
    decoder_dim: int = 512
    joiner_dim: int = 512
    context_size: int = 2
    mode_dim: int = 12  # conditioned only
    with_simple_proj: bool = False  # k2 pruned loss needs the "simple" projections
    ctc: bool = False  # an auxiliary CTC output on the encoder (training only)
    #: an auxiliary classifier of the utterance's final mark on the encoder's last frames (training only)
    sentence_end: bool = False
    #: initial std of the predictor's embeddings (zipformer_pc.model.decoder.Decoder);
    #: only the initialisation depends on it
    embed_init_std: Optional[float] = None

    def __post_init__(self) -> None:
        if self.model_type not in MODEL_TYPES:
            raise ValueError(f"--model-type must be one of {', '.join(MODEL_TYPES)}, not {self.model_type!r}")
        if self.context_size < 1:
            raise ValueError(f"--context-size must be >= 1, got {self.context_size}")


def modes_of(model_type: str) -> List[int]:
    """Output modes a model type is trained on (those it searches: ``zipformer_pc.modes``)."""
    return searched_modes(model_type)


class Transducer(nn.Module):
    """Encoder + one or two prediction heads.

    ``heads`` maps a head name to its (decoder, joiner); ``head_for(mode)``
    says which head and which mode id produce a given output.
    """

    def __init__(self, encoder: nn.Module, cfg: HeadConfig) -> None:
        super().__init__()
        self.encoder = encoder
        self.cfg = cfg
        self.encoder_frozen = False
        enc_dim = encoder.output_dim
        names = [MODE_NAMES[m] for m in modes_of(cfg.model_type)] if cfg.model_type == "two-decoder" else ["main"]
        mode_dim = cfg.mode_dim if cfg.model_type == "conditioned" else 0
        self.decoders = nn.ModuleDict(
            {n: Decoder(cfg.vocab_size, cfg.decoder_dim, cfg.blank_id, cfg.context_size, mode_dim,
                        embed_std=cfg.embed_init_std) for n in names}
        )
        self.joiners = nn.ModuleDict(
            {n: Joiner(enc_dim, cfg.decoder_dim, cfg.joiner_dim, cfg.vocab_size) for n in names}
        )
        if cfg.with_simple_proj:
            self.simple_am_proj = nn.ModuleDict({n: nn.Linear(enc_dim, cfg.vocab_size) for n in names})
            self.simple_lm_proj = nn.ModuleDict({n: nn.Linear(cfg.decoder_dim, cfg.vocab_size) for n in names})
        else:
            self.simple_am_proj = None
            self.simple_lm_proj = None
        # Auxiliary CTC output (--ctc-loss-scale): speeds up the encoder's early
        # learning; decoding, export and streaming never use it.
        self.ctc_output = (
            nn.Sequential(nn.Dropout(0.1), nn.Linear(enc_dim, cfg.vocab_size)) if cfg.ctc else None
        )
        # Auxiliary sentence-end classifier (--sentence-end-loss-scale): makes the
        # encoder carry, where an utterance ends, whether its last sentence is a
        # question; training only, like the CTC output.
        self.sentence_end_output = nn.Linear(enc_dim, len(SENTENCE_END_MARKS)) if cfg.sentence_end else None

    @property
    def model_type(self) -> str:
        return self.cfg.model_type

    def head_for(self, mode: int) -> str:
        """Head name producing ``mode`` (for ``punct`` the P head also serves N via normalization)."""
        if self.model_type == "two-decoder":
            return MODE_NAMES[mode]
        return "main"

    def trained_modes(self) -> List[int]:
        return modes_of(self.model_type)

    def forward_head(
        self,
        encoder_out: torch.Tensor,
        encoder_lens: torch.Tensor,
        targets: Sequence[Sequence[int]],
        mode: int,
        loss_cfg: LossConfig,
        batch_idx: Optional[int] = None,
    ) -> torch.Tensor:
        """Summed transducer loss of ``targets`` (one per row of encoder_out) in ``mode``."""
        name = self.head_for(mode)
        decoder, joiner = self.decoders[name], self.joiners[name]
        y, y_lens = pad_targets(targets, self.cfg.blank_id, encoder_out.device)
        sos = torch.full((y.size(0), 1), self.cfg.blank_id, dtype=y.dtype, device=y.device)
        decoder_in = torch.cat([sos, y], dim=1)
        # Positions past each target's end are padding: embed them as zeros.
        pad_mask = torch.arange(decoder_in.size(1), device=y.device)[None, :] > y_lens[:, None]
        decoder_in = decoder_in.masked_fill(pad_mask, -1)
        decoder_out = decoder(decoder_in, mode=mode if decoder.conditioned else None)
        loss, _ = transducer_loss(
            encoder_out, encoder_lens, decoder_out, joiner, y, y_lens, loss_cfg, self.cfg.blank_id,
            simple_am_proj=self.simple_am_proj[name] if self.simple_am_proj is not None else None,
            simple_lm_proj=self.simple_lm_proj[name] if self.simple_lm_proj is not None else None,
            batch_idx=batch_idx,
        )
        return loss

    def freeze_encoder(self, frozen: bool = True) -> None:
        """Train the heads only: the encoder's weights get no gradient and it runs in eval mode (no
        dropout or feature masking) without building a graph, so a step costs little more than its
        forward pass."""
        self.encoder_frozen = frozen
        for p in self.encoder.parameters():
            p.requires_grad_(not frozen)

    def encode(self, features: torch.Tensor, feature_lens: torch.Tensor):
        """Encoder output of utterances followed by their tail silence (``add_tail_silence``);
        in training mode with the chunk configuration drawn at random (when causal)."""
        was_training = self.encoder.training
        chunk, left = self.encoder.draw_chunk_config() if was_training and self.encoder.config.causal else (-1, -1)
        features, feature_lens = add_tail_silence(features, feature_lens, chunk)
        if not self.encoder_frozen:
            return self.encoder(features, feature_lens, chunk_size=chunk, left_context_frames=left)
        # a frozen encoder runs in eval mode (no dropout or feature masking)
        self.encoder.eval()
        try:
            with torch.no_grad():
                return self.encoder(features, feature_lens, chunk_size=chunk, left_context_frames=left)
        finally:
            self.encoder.train(was_training)

    def forward(
        self,
        features: torch.Tensor,
        feature_lens: torch.Tensor,
        tokens_n: Sequence[Sequence[int]],
        tokens_p: Sequence[Optional[Sequence[int]]],
        alpha: float = 0.5,
        loss_cfg: LossConfig = LossConfig(),
        batch_idx: Optional[int] = None,
        ctc_scale: float = 0.0,
        encoder_out: Optional[Tuple[torch.Tensor, torch.Tensor]] = None,
        ctc_targets: str = "auto",
        sentence_end_scale: float = 0.0,
        end_classes: Optional[torch.Tensor] = None,
    ) -> Dict[str, torch.Tensor]:
        """
        Args:
          features: (N, T, 80); feature_lens: (N,).
          tokens_n: N token ids per utterance.
          tokens_p: P token ids per utterance, None where the utterance has no P.
          alpha: weight of the P term.
          ctc_scale: weight of the auxiliary CTC loss (needs ``HeadConfig.ctc``),
            added to the transducer loss.
          ctc_targets: the CTC loss's references (``CTC_TARGETS``): ``N``, ``P``
            (the utterances that have P; makes the encoder itself carry case and
            marks, which a stateless predictor cannot see far enough for), or
            ``auto``: N, P for a model that trains P only (``punct``).
          encoder_out: (output, lengths) of the encoder computed beforehand (a
            frozen encoder's cache, ``training.encoder_cache``): the features
            are then not encoded.
          sentence_end_scale: weight of the auxiliary sentence-end loss (needs
            ``HeadConfig.sentence_end``), added to the transducer loss.
          end_classes: (N,) each utterance's class for it
            (:func:`sentence_end_classes`, -1: not counted).
        Returns:
          dict with ``loss`` (to backpropagate), ``loss_n`` / ``loss_p``
          (per-utterance means, 0 when absent), ``num_n`` / ``num_p``
          (utterances behind each term), ``loss_ctc`` and ``loss_end``
          (per-utterance means, 0 when unused) and ``frames`` (encoder frames).
        """
        if not 0.0 <= alpha <= 1.0:
            raise ValueError(f"alpha must be in [0, 1], got {alpha}")
        if encoder_out is None:
            encoder_out, encoder_lens = self.encode(features, feature_lens)
        else:
            encoder_out, encoder_lens = encoder_out
        dev = encoder_out.device
        # the losses are float32 whatever autocast made of encoder_out (bfloat16, float16)
        zero = encoder_out.new_zeros((), dtype=torch.float32)
        out: Dict[str, torch.Tensor] = {
            "loss_n": zero, "loss_p": zero,
            "num_n": torch.tensor(0, device=dev), "num_p": torch.tensor(0, device=dev),
            "frames": encoder_lens.sum(), "loss_ctc": zero, "loss_end": zero,
        }

        def references(mode: str) -> Tuple[List[int], List[Sequence[int]]]:
            """(batch indices, token ids) of the utterances with a ``mode`` reference."""
            if mode == MODE_N:
                return list(range(len(tokens_n))), list(tokens_n)
            idx = [i for i, t in enumerate(tokens_p) if t is not None]
            return idx, [tokens_p[i] for i in idx]

        terms = []
        for mode in self.trained_modes():
            idx, targets = references(mode)
            if not idx:
                continue
            sel = torch.as_tensor(idx, device=dev)
            total = self.forward_head(encoder_out[sel], encoder_lens[sel], targets, mode, loss_cfg, batch_idx)
            mean = total / len(idx)
            key = "n" if mode == MODE_N else "p"
            out[f"loss_{key}"] = mean
            out[f"num_{key}"] = torch.tensor(len(idx), device=dev)
            if len(self.trained_modes()) == 1:  # punct, norm
                weight = 1.0
            else:
                weight = alpha if mode == MODE_P else 1.0 - alpha
            terms.append(weight * mean)
        if ctc_scale > 0:
            if self.ctc_output is None:
                raise ValueError("ctc_scale > 0 needs a model built with a CTC output (HeadConfig.ctc)")
            if ctc_targets not in CTC_TARGETS:
                raise ValueError(f"ctc_targets must be one of {', '.join(CTC_TARGETS)}, not {ctc_targets!r}")
            p_targets = ctc_targets == "P" or (ctc_targets == "auto" and MODE_N not in self.trained_modes())
            idx, targets = references(MODE_P if p_targets else MODE_N)
            if idx:
                sel = torch.as_tensor(idx, device=dev)
                out["loss_ctc"] = self.ctc_loss(encoder_out[sel], encoder_lens[sel], targets) / len(idx)
                terms.append(ctc_scale * out["loss_ctc"])
        if sentence_end_scale > 0:
            if self.sentence_end_output is None:
                raise ValueError("sentence_end_scale > 0 needs a model built with a sentence-end output "
                                 "(HeadConfig.sentence_end)")
            if end_classes is None or len(end_classes) != encoder_out.size(0):
                raise ValueError("sentence_end_scale > 0 needs one end class per utterance (end_classes)")
            end_classes = end_classes.to(dev)
            keep = end_classes >= 0
            if bool(keep.any()):
                out["loss_end"] = self.sentence_end_loss(encoder_out[keep], encoder_lens[keep],
                                                         end_classes[keep]) / int(keep.sum())
                terms.append(sentence_end_scale * out["loss_end"])
        out["loss"] = sum(terms) if terms else zero
        return out

    def ctc_loss(self, encoder_out: torch.Tensor, encoder_lens: torch.Tensor,
                 targets: Sequence[Sequence[int]]) -> torch.Tensor:
        """Summed CTC loss (blank = the transducer's blank) of ``targets`` on the encoder output."""
        assert self.ctc_output is not None
        log_probs = self.ctc_output(encoder_out).float().log_softmax(-1)
        flat = torch.as_tensor([t for seq in targets for t in seq], dtype=torch.long, device=encoder_out.device)
        target_lens = torch.as_tensor([len(t) for t in targets], dtype=torch.long, device=encoder_out.device)
        # zero_infinity: an utterance with more tokens than frames adds 0, not inf
        return nn.functional.ctc_loss(log_probs.transpose(0, 1), flat, encoder_lens, target_lens,
                                      blank=self.cfg.blank_id, reduction="sum", zero_infinity=True)

    def sentence_end_loss(self, encoder_out: torch.Tensor, encoder_lens: torch.Tensor,
                          classes: torch.Tensor) -> torch.Tensor:
        """Summed over utterances: the cross-entropy of each utterance's class on each of
        its last :data:`SENTENCE_END_FRAMES` encoder frames, averaged over those frames."""
        assert self.sentence_end_output is not None
        # frame index of each utterance's last SENTENCE_END_FRAMES frames (fewer when it is
        # shorter: the first frame is repeated and those repeats are not counted)
        back = torch.arange(SENTENCE_END_FRAMES - 1, -1, -1, device=encoder_out.device)[None, :]
        idx = encoder_lens[:, None] - 1 - back
        counted = idx >= 0
        idx = idx.clamp(min=0)
        frames = encoder_out.gather(1, idx[:, :, None].expand(-1, -1, encoder_out.size(2)))
        logits = self.sentence_end_output(frames).float()
        ce = nn.functional.cross_entropy(logits.transpose(1, 2), classes[:, None].expand(-1, idx.size(1)),
                                         reduction="none")
        return ((ce * counted).sum(1) / counted.sum(1).clamp(min=1)).sum()

    def head_config(self) -> Dict[str, object]:
        return asdict(self.cfg)


# ---------------------------------------------------------------- construction


def build_model(model_config: Dict[str, Dict[str, object]]) -> Transducer:
    """The one place a model is built: ``{"encoder": EncoderConfig fields, "head": HeadConfig fields}``.

    Checkpoints store this dict, so decoding and export rebuild exactly the
    trained model.
    """
    from zipformer_pc.model.zipformer import EncoderConfig, ZipformerEncoder

    enc_cfg = EncoderConfig(**model_config["encoder"])  # type: ignore[arg-type]
    head_cfg = HeadConfig(**model_config["head"])  # type: ignore[arg-type]
    return Transducer(ZipformerEncoder(enc_cfg), head_cfg)


def make_model_config(encoder_name: str, encoder_overrides: Dict[str, object], head: HeadConfig) -> Dict[str, Dict[str, object]]:
    from zipformer_pc.model.zipformer import EncoderConfig

    enc = EncoderConfig.from_name(encoder_name, **encoder_overrides)
    return {"encoder": asdict(enc), "head": asdict(head)}
