"""MUSAN noise and music mixed into the training cuts on the fly, as icefall's
LibriSpeech recipe does (its ``--enable-musan``).

``prepare.sh --musan true`` (local/prepare_musan.py) downloads MUSAN (OpenSLR
17) and writes ``DATA_DIR/musan/musan_cuts.jsonl.gz``: 10-second windows of its
noise and music recordings (not its speech), without features.  ``train.py
--musan-cuts`` then mixes one of them into each training cut with probability
``--musan-prob`` (0.5) at a signal-to-noise ratio drawn from ``--musan-snr``
(10 to 20 dB): lhotse's ``CutSet.mix``, the operation of its ``CutMix``
transform, with the noise repeated to cover the whole cut and started at a
random offset of its window.

Two differences from ``CutMix`` as icefall uses it.  The draws come from a
random generator keyed by the seed, the epoch and the batch's cut ids (as
:mod:`zipformer_pc.data.augment` does), so a resumed run, or a DataLoader
worker, mixes what the uninterrupted run did.  And the noise cuts have no
features: a mixed cut's features are computed from its mixed audio by
:class:`~zipformer_pc.data.dataset.PCAsrDataset` with the recipe's one fbank
config, while the cuts left unmixed read their stored features (noise cuts
that do carry features are mixed by lhotse in the feature domain, icefall's
way, and nothing is computed).  With ``--augment`` too, the augmentation (room,
noise, channel) comes first, as its babble mixes in other cuts of the batch as
they are, and MUSAN is mixed into the augmented audio.
"""

import hashlib
import logging
import random
from pathlib import Path
from typing import Tuple

#: icefall's settings: half the cuts, 10 to 20 dB
DEFAULT_PROB = 0.5
DEFAULT_SNR = (10.0, 20.0)


def parse_snr(spec: str) -> Tuple[float, float]:
    """``"10,20"`` -> (10.0, 20.0); ``"15"`` -> (15.0, 15.0)."""
    parts = [float(x) for x in str(spec).split(",") if x.strip()]
    if len(parts) == 1:
        parts = parts * 2
    if len(parts) != 2 or parts[0] > parts[1]:
        raise ValueError(f"--musan-snr is LOW,HIGH in dB with LOW <= HIGH (or one value), not {spec!r}")
    return parts[0], parts[1]


def needs_audio(cut) -> bool:
    """Whether the features of ``cut`` must be computed from its audio: a cut without
    features, or a mix with a track that has none (lhotse mixes features only when every
    track has them)."""
    tracks = getattr(cut, "tracks", None)
    if tracks is None:
        return not cut.has_features
    return any(not t.cut.has_features for t in tracks if hasattr(t.cut, "has_features"))


class MusanMixer:
    """Mixes noise cuts into the cuts of a batch: ``mixer(cuts, epoch) -> cuts``, each cut
    kept (probability ``1 - prob``) or mixed with one noise window at a random SNR in
    ``snr`` dB, its id, duration and supervisions unchanged."""

    def __init__(self, cuts_path: Path, prob: float = DEFAULT_PROB, snr: Tuple[float, float] = DEFAULT_SNR,
                 seed: int = 42) -> None:
        from lhotse import load_manifest

        if not 0.0 <= prob <= 1.0:
            raise ValueError(f"--musan-prob must be in [0, 1], not {prob}")
        self.noise = load_manifest(cuts_path)  # eager: a few thousand windows
        if len(self.noise) == 0:
            raise ValueError(f"{cuts_path} holds no cut")
        self.prob, self.snr, self.seed = prob, tuple(snr), seed
        hours = sum(c.duration for c in self.noise) / 3600
        logging.info(f"MUSAN: {len(self.noise)} noise/music cuts ({hours:.1f} h) from {cuts_path}, mixed into "
                     f"{prob:g} of the training cuts at {self.snr[0]:g} to {self.snr[1]:g} dB SNR")

    def rng(self, epoch: int, ids) -> random.Random:
        key = f"{self.seed}:musan:{epoch}:" + ",".join(sorted(ids))
        return random.Random(int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "little"))

    def __call__(self, cuts, epoch: int):
        from lhotse import CutSet

        cuts = CutSet.from_cuts(list(cuts))
        return cuts.mix(cuts=self.noise, duration=None, snr=self.snr, mix_prob=self.prob, preserve_id="left",
                        seed=self.rng(epoch, [c.id for c in cuts]), random_mix_offset=True).to_eager()
