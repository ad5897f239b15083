"""The data loaders of training, validation and decoding (icefall's AsrDataModule).

One place builds the lhotse samplers: training shuffles cuts into duration
buckets (``DynamicBucketingSampler``; ``num_buckets=1``: ``DynamicCutSampler``),
or reads them shortest first (``sort_by_duration``: SortaGrad's first epochs),
and may mix MUSAN noise in (:mod:`zipformer_pc.data.musan`), warp the
frequency axis, apply SpecAugment and the paper's random per-batch P split;
``bucket_buffer_size`` and ``num_cuts_for_bins_estimate`` are lhotse's
``buffer_size`` and ``num_cuts_for_bins_estimate`` (960 h: icefall's 30
buckets and 210000 cuts, benchmarks/sampler_speed.py);
validation and decoding read the cuts in order, in two duration buckets (a single cut: none).
Every loader yields the batches of :class:`~zipformer_pc.data.dataset.PCAsrDataset`;
``loader.sampler`` and ``loader.dataset`` are the sampler and the dataset
(for ``set_epoch`` and the sampler state of mid-epoch resumption).
"""

import logging
import warnings
from typing import Optional

import torch

from zipformer_pc.data.dataset import PCAsrDataset
from zipformer_pc.data.tokenizer import Tokenizer


def spec_augment():
    """icefall's SpecAugment settings for LibriSpeech."""
    from lhotse.dataset import SpecAugment

    return SpecAugment(time_warp_factor=80, num_frame_masks=10, features_mask_size=27,
                       num_feature_masks=2, frames_mask_size=100)


def shortest_share(ordered, fraction: float) -> list:
    """The first cuts of ``ordered`` (shortest first) whose durations add up to ``fraction`` of the
    whole, the cut that crosses it included (at least one cut)."""
    total = sum(c.duration for c in ordered)
    out, acc = [], 0.0
    for c in ordered:
        if out and acc >= fraction * total:
            break
        out.append(c)
        acc += c.duration
    return out


class PCAsrDataModule:
    """Loaders over cut manifests for one tokenizer, batch size and process (``rank`` of ``world_size``)."""

    def __init__(self, tokenizer: Tokenizer, max_duration: float, seed: int = 42,
                 world_size: int = 1, rank: int = 0) -> None:
        self.tokenizer = tokenizer
        self.max_duration = max_duration
        self.seed = seed
        self.world_size = world_size
        self.rank = rank

    def train_dataloader(self, cuts_path: str, num_buckets: int = 10, use_spec_augment: bool = False,
                         freq_warp: float = 0.0, augment=None,
                         punct_proportion: Optional[float] = None, use_auto_punct: bool = False,
                         num_workers: int = 0, sort_by_duration: bool = False,
                         sort_fraction: float = 1.0, bucket_buffer_size: int = 20000,
                         num_cuts_for_bins_estimate: int = 10000, musan=None) -> torch.utils.data.DataLoader:
        """``sort_by_duration``: every epoch reads the cuts in one order, shortest first (ties by id),
        in batches of up to ``max_duration`` seconds (``num_buckets`` is ignored); the cuts are
        loaded into memory to sort them.  ``sort_fraction``: only the shortest cuts that make up
        that fraction of the audio are read then (at least one)."""
        from lhotse import CutSet, load_manifest_lazy
        from lhotse.dataset import DynamicBucketingSampler, DynamicCutSampler

        dataset = PCAsrDataset(self.tokenizer, spec_augment=spec_augment() if use_spec_augment else None,
                               freq_warp=freq_warp, augment=augment, musan=musan,
                               punct_proportion=punct_proportion,
                               use_auto_punct=use_auto_punct, seed=self.seed)
        opts = dict(max_duration=self.max_duration, shuffle=True, drop_last=False, seed=self.seed,
                    world_size=self.world_size, rank=self.rank)
        cuts = load_manifest_lazy(cuts_path)
        if sort_by_duration:
            ordered = sorted(cuts, key=lambda c: (c.duration, c.id))
            if sort_fraction < 1.0:
                n = len(ordered)
                ordered = shortest_share(ordered, sort_fraction)
                logging.info(f"SortaGrad reads the shortest {len(ordered)} of {n} training cuts "
                             f"({sort_fraction:g} of the audio, up to {ordered[-1].duration:.2f} s)")
            cuts = CutSet.from_cuts(ordered)
            with warnings.catch_warnings():  # lhotse's advice to read lazily: sorting needs every cut
                warnings.filterwarnings("ignore", message=".*eagerly read CutSet")
                sampler = DynamicCutSampler(cuts, **{**opts, "shuffle": False})
        elif num_buckets > 1:
            sampler = DynamicBucketingSampler(cuts, num_buckets=num_buckets, buffer_size=bucket_buffer_size,
                                              num_cuts_for_bins_estimate=num_cuts_for_bins_estimate, **opts)
        else:
            sampler = DynamicCutSampler(cuts, **opts)
        return torch.utils.data.DataLoader(dataset, sampler=sampler, batch_size=None, num_workers=num_workers)

    def valid_dataloader(self, cuts_path: str, use_auto_punct: bool = False) -> torch.utils.data.DataLoader:
        """Validation cuts, split over the processes of a DDP run."""
        return self._in_order(cuts_path, PCAsrDataset(self.tokenizer, use_auto_punct=use_auto_punct, seed=self.seed),
                              self.world_size, self.rank)

    def test_dataloader(self, cuts_path: str) -> torch.utils.data.DataLoader:
        """Every cut of a test set, in one process."""
        return self._in_order(cuts_path, PCAsrDataset(self.tokenizer), 1, 0)

    def _in_order(self, cuts_path: str, dataset: PCAsrDataset, world_size: int, rank: int):
        from itertools import islice

        from lhotse import load_manifest_lazy
        from lhotse.dataset import DynamicBucketingSampler, DynamicCutSampler

        cuts = load_manifest_lazy(cuts_path)
        if sum(1 for _ in islice(cuts, 2)) < 2:  # one cut: no buckets to estimate
            sampler = DynamicCutSampler(cuts, max_duration=self.max_duration, shuffle=False, world_size=world_size,
                                        rank=rank)
        else:
            sampler = DynamicBucketingSampler(cuts, max_duration=self.max_duration, shuffle=False, num_buckets=2,
                                              world_size=world_size, rank=rank)
        return torch.utils.data.DataLoader(dataset, sampler=sampler, batch_size=None, num_workers=0)
