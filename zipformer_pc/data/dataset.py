"""Batches for training and decoding: features plus both token sequences.

A lhotse sampler yields a CutSet per batch; :class:`PCAsrDataset` turns it
into padded features and, per utterance, the N token ids and the P token ids
(None when the cut has no P reference, or when the paper's random per-batch
split withholds it).  Training may warp each utterance's frequency axis
(:func:`warp_frequencies`, a vocal-tract-length perturbation) and apply
SpecAugment.
"""

import hashlib
import random
from typing import Dict, Optional

import torch

from zipformer_pc.data.references import get_n, get_p
from zipformer_pc.data.tokenizer import Tokenizer


def _stable_rng(seed: int, key: str) -> random.Random:
    return random.Random(int.from_bytes(hashlib.sha256(f"{seed}:{key}".encode()).digest()[:8], "little"))


# the largest --freq-warp: a factor of 1 - W must stay well above 0
MAX_FREQ_WARP = 0.5


def warp_frequencies(features: torch.Tensor, alpha: float, cutoff: float = 0.8) -> torch.Tensor:
    """Vocal tract length perturbation (Jaitly & Hinton, 2013) on the mel bins of ``features`` (..., F).

    What the unwarped features hold at bin ``x`` moves to bin ``alpha * x`` (``alpha`` > 1: the
    formants move up, as for a shorter vocal tract) up to the knee ``cutoff * (F - 1) * min(1, 1 /
    alpha)``; above it a second line joins the knee to the last bin, so the first and last bins
    stay where they are and no bin reads from outside the input.  Each output bin is interpolated
    linearly between its two nearest source bins.  ``alpha == 1`` returns ``features`` unchanged.
    """
    if not 0.0 < cutoff < 1.0:
        raise ValueError(f"cutoff must be within (0, 1), not {cutoff}")
    if alpha <= 0.0:
        raise ValueError(f"alpha must be positive, not {alpha}")
    if alpha == 1.0:
        return features
    top = features.shape[-1] - 1
    knee = cutoff * top * min(1.0, 1.0 / alpha)  # source position of the knee
    knee_out = alpha * knee  # where the knee lands
    out = torch.arange(top + 1, dtype=torch.float64)
    src = torch.where(out <= knee_out, out / alpha, knee + (out - knee_out) * (top - knee) / (top - knee_out))
    src = src.clamp(0, top)
    lo = src.floor().long().clamp(max=top - 1)
    frac = (src - lo).to(features.dtype)
    return features[..., lo] * (1 - frac) + features[..., lo + 1] * frac


def _pad(feats) -> "tuple[torch.Tensor, torch.Tensor]":
    """Per-cut features (T_i, F) -> (N, T_max, F) padded as lhotse pads log-mel features
    (the model masks the padding) and their lengths (N,) int32."""
    from lhotse.utils import LOG_EPSILON

    lens = torch.tensor([f.shape[0] for f in feats], dtype=torch.int32)
    out = torch.full((len(feats), int(lens.max()), feats[0].shape[1]), float(LOG_EPSILON))
    for i, f in enumerate(feats):
        out[i, : f.shape[0]] = f
    return out, lens


class PCAsrDataset(torch.utils.data.Dataset):
    """Maps a CutSet (one batch) to a dict of tensors and token lists.

    Args:
      tokenizer: the recipe's sentencepiece model.
      spec_augment: a callable ``(features (N,T,F), supervision_segments) -> features``
        (e.g. lhotse's SpecAugment) applied in training, or None.
      freq_warp: training's vocal tract length perturbation: each utterance's mel bins are
        warped by a factor drawn uniformly from ``[1 - freq_warp, 1 + freq_warp]``
        (:func:`warp_frequencies`; the draw depends on the seed, the epoch and the cut id only,
        so a resumed run draws what the uninterrupted one did); 0: none.
      punct_proportion: the paper's random per-batch split: in every batch
        only this fraction of the utterances that have P keep it (None: use
        the manifests as they are, i.e. the fixed subsets).
      use_auto_punct: read the automatically punctuated P' reference
        (``custom["text_p_auto"]``) instead of P.
      seed: makes the random per-batch split reproducible.
      augment: an :class:`~zipformer_pc.data.augment.Augmenter`: each cut's audio is
        augmented (room, noise, channel, level) and its features computed from it, with
        the one feature config, instead of read; None: the stored features.
      musan: a :class:`~zipformer_pc.data.musan.MusanMixer`: noise and music mixed into
        some cuts (after ``augment``); a mixed cut's features are computed from its audio
        when the noise has no stored features, the other cuts read theirs.
    """

    def __init__(
        self,
        tokenizer: Tokenizer,
        spec_augment=None,
        freq_warp: float = 0.0,
        punct_proportion: Optional[float] = None,
        use_auto_punct: bool = False,
        seed: int = 42,
        augment=None,
        musan=None,
    ) -> None:
        super().__init__()
        if punct_proportion is not None and not 0.0 <= punct_proportion <= 1.0:
            raise ValueError(f"punct_proportion must be in [0, 1], got {punct_proportion}")
        if not 0.0 <= freq_warp < MAX_FREQ_WARP:
            raise ValueError(f"freq_warp is the largest relative change of the frequency axis, in "
                             f"[0, {MAX_FREQ_WARP:g}), not {freq_warp}")
        self.tokenizer = tokenizer
        self.spec_augment = spec_augment
        self.freq_warp = freq_warp
        self.punct_proportion = punct_proportion
        self.use_auto_punct = use_auto_punct
        self.seed = seed
        self.epoch = 0
        self.augment = augment
        self.musan = musan
        self._extractor = None
        #: augmented cuts whose audio could not be made, read plain instead
        self.augment_failures = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def _augmented_features(self, cuts):
        """Features of the augmented audio of ``cuts``, padded as collate_features pads
        (a cut whose augmented audio fails is read plain, counted and logged)."""
        import logging

        from zipformer_pc.features import SAMPLING_RATE, lhotse_fbank

        if self._extractor is None:
            self._extractor = lhotse_fbank()
        augmented, _ = self.augment(list(cuts), self.epoch)
        if self.musan is not None:  # after the augmentation, whose babble reads the batch's plain cuts
            augmented = list(self.musan(augmented, self.epoch))
        feats = []
        for plain, cut in zip(cuts, augmented):
            try:
                audio = cut.load_audio()
            except Exception as e:
                self.augment_failures += 1
                logging.warning(f"Augmenting {plain.id} failed ({type(e).__name__}: {str(e)[:120]}): read plain "
                                f"({self.augment_failures} so far)")
                audio = plain.drop_features().resample(SAMPLING_RATE).load_audio()
            feats.append(torch.from_numpy(self._extractor.extract(audio[0], SAMPLING_RATE)))
        return _pad(feats)

    def _mixed_features(self, cuts):
        """Features of ``cuts`` where some are mixes: those whose noise has no stored features
        from their mixed audio (the one feature config), the others as stored (lhotse mixes
        features when every track has them)."""
        from zipformer_pc.data.musan import needs_audio
        from zipformer_pc.features import SAMPLING_RATE, lhotse_fbank

        feats = []
        for cut in cuts:
            if needs_audio(cut):
                if self._extractor is None:
                    self._extractor = lhotse_fbank()
                audio = cut.load_audio()
                feats.append(torch.from_numpy(self._extractor.extract(audio[0], SAMPLING_RATE)))
            else:
                feats.append(torch.from_numpy(cut.load_features()))
        return _pad(feats)

    def __getitem__(self, cuts) -> Dict[str, object]:
        from lhotse.dataset.collation import collate_features

        cuts = cuts.sort_by_duration(ascending=False)
        if self.augment is not None:
            features, feature_lens = self._augmented_features(cuts)
        elif self.musan is not None:
            features, feature_lens = self._mixed_features(self.musan(cuts, self.epoch))
        else:
            features, feature_lens = collate_features(cuts)
        if self.freq_warp > 0:
            for i, cut in enumerate(cuts):
                alpha = _stable_rng(self.seed, f"warp:{self.epoch}:{cut.id}").uniform(1 - self.freq_warp,
                                                                                     1 + self.freq_warp)
                features[i] = warp_frequencies(features[i], alpha)
        if self.spec_augment is not None:
            segments = torch.stack(
                [torch.arange(len(cuts)), torch.zeros(len(cuts), dtype=torch.long), feature_lens], dim=1
            ).to(torch.int32)
            features = self.spec_augment(features, segments)
        texts_n, texts_p = [], []
        for cut in cuts:
            sups = cut.supervisions
            texts_n.append(" ".join(get_n(s) for s in sups))
            ps = [get_p(s, self.use_auto_punct) for s in sups]
            texts_p.append(" ".join(ps) if sups and all(p is not None for p in ps) else None)
        if self.punct_proportion is not None:
            have = [i for i, t in enumerate(texts_p) if t is not None]
            rng = _stable_rng(self.seed, f"{self.epoch}:" + ",".join(c.id for c in cuts))
            keep = set(rng.sample(have, round(self.punct_proportion * len(have))))
            texts_p = [t if i in keep else None for i, t in enumerate(texts_p)]
        return {
            "features": features,
            "feature_lens": feature_lens,
            "tokens_n": [self.tokenizer.encode(t) for t in texts_n],
            "tokens_p": [self.tokenizer.encode(t) if t is not None else None for t in texts_p],
            "texts_n": texts_n,
            "texts_p": texts_p,
            "cut_ids": [c.id for c in cuts],
            "durations": [c.duration for c in cuts],
        }
