#!/usr/bin/env python3
"""Train a joint punctuated / normalized streaming Zipformer transducer.

Usage:
  # tiny conditioned model on the embedded corpus, CPU
  python -m zipformer_pc.training.train --exp-dir egs/synth/exp/conditioned \
      --train-cuts data/synth/fbank/synth_cuts_train_p1.jsonl.gz \
      --valid-cuts data/synth/fbank/synth_cuts_dev.jsonl.gz \
      --bpe-model data/synth/lang_bpe_256/bpe.model \
      --model-type conditioned --encoder tiny --num-epochs 10 --max-duration 200

  # paper-size model on LibriSpeech with 4 GPUs (DDP, fp16; --dtype bf16 on GPUs that have it)
  python -m zipformer_pc.training.train --world-size 4 --dtype fp16 --encoder paper \
      --model-type two-decoder --exp-dir exp/two_decoder --num-epochs 40 \
      --train-cuts data/librispeech/fbank/librispeech_cuts_train_p1.jsonl.gz ...

  # resume: after epoch 3, or from checkpoint-6000.pt mid-epoch
  python -m zipformer_pc.training.train ... --start-epoch 4
  python -m zipformer_pc.training.train ... --start-batch 6000

Model types (``--model-type``): punct, norm, two-decoder, conditioned
(zipformer_pc.model.transducer).  Loss ``(1-alpha) L_N + alpha L_P`` (``--alpha``).
Which utterances have a P reference comes from the training manifest (the
fixed ``_pF`` subsets of prepare.sh), or, with ``--punct-proportion F``, from
the paper's random per-batch split.  ``--use-auto-punct true`` trains on the
auto-punctuated P' references.

The steps, as in icefall's train.py: ``get_parser`` and ``TRAINING_DEFAULTS``
(options), ``get_model`` (model construction, resumption, ``--init-from``),
``compute_loss`` / ``compute_validation_loss`` (loss), ``train_one_epoch``
(one epoch, with the checkpoints and validations it writes) and ``run``
(set-up and the epoch loop).  Batches come from
:class:`zipformer_pc.data.datamodule.PCAsrDataModule`, as for decoding.

The experiment directory holds ``epoch-E.pt``, ``checkpoint-B.pt`` (every
``--save-every-n`` batches, last ``--keep-last-k`` kept), ``log/`` (the top of
each log lists every parameter), ``tensorboard/`` and ``model_config.json``.
"""

import argparse
import contextlib
import fcntl
import json
import logging
import math
import os
import random
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from zipformer_pc.data.augment import Augmenter, parse_augment
from zipformer_pc.data.datamodule import PCAsrDataModule
from zipformer_pc.data.dataset import MAX_FREQ_WARP
from zipformer_pc.data.musan import MusanMixer, parse_snr
from zipformer_pc.data.references import any_auto_punct
from zipformer_pc.data.tokenizer import Tokenizer
from zipformer_pc.logs import setup_logging
from zipformer_pc.model.loss import LossConfig, resolve_backend
from zipformer_pc.model.scaling import load_whiten_state, whiten_state
from zipformer_pc.model.transducer import (CTC_TARGETS, HeadConfig, Transducer, build_model, head_dim,
                                           make_model_config, sentence_end_classes)
from zipformer_pc.model.zipformer import ENCODER_CONFIGS, count_parameters
from zipformer_pc.modes import MODEL_TYPES
from zipformer_pc.options import str2bool
from zipformer_pc.training.checkpoint import (
    INIT_MODULES,
    init_from_checkpoint,
    RunningAverage,
    load_checkpoint,
    remove_old_checkpoints,
    save_checkpoint,
)
from zipformer_pc.training.encoder_cache import EncoderCache
from zipformer_pc.training.guards import GradScaleGuard, InfCheck, OomScanFailed, pessimistic_batches, scan_for_oom
from zipformer_pc.training.optim import Eden, make_optimizer

#: ``--dtype``: the precisions training runs its forward pass in (:func:`autocast_dtype`)
TRAIN_DTYPES = ("fp32", "fp16", "bf16")

ENCODER_FLAGS = (
    "num_encoder_layers", "downsampling_factor", "encoder_dim", "feedforward_dim", "num_heads",
    "encoder_unmasked_dim", "cnn_module_kernel", "chunk_size", "left_context_frames",
)


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    g = p.add_argument_group("data")
    g.add_argument("--train-cuts", required=True, help="Training cut manifest")
    g.add_argument("--valid-cuts", required=True, help="Validation cut manifest")
    g.add_argument("--bpe-model", required=True)
    g.add_argument("--max-duration", type=float, default=None, help="Seconds of audio per batch [per encoder]")
    g.add_argument("--num-buckets", type=int, default=10,
                   help="Duration buckets of the DynamicBucketingSampler; 1 = no bucketing (DynamicCutSampler) "
                        "[10; egs/librispeech/run.sh: 30, as icefall]")
    g.add_argument("--bucket-buffer-size", type=int, default=20000,
                   help="Cuts the DynamicBucketingSampler holds over all its buckets, which is also its shuffling "
                        "window (lhotse's buffer_size; since lhotse 1.20 it replaces shuffle_buffer_size, so "
                        "icefall's 960 h setting of 2000 x 30 buckets plus a 150k shuffle buffer is 210000) "
                        "[20000, lhotse's]")
    g.add_argument("--num-cuts-for-bins-estimate", type=int, default=10000,
                   help="Cuts the sampler reads to estimate its bucket boundaries [10000, lhotse's]")
    g.add_argument("--sortagrad-epochs", type=int, default=None,
                   help="SortaGrad: the first N epochs read the training cuts shortest first, in one fixed order "
                        "(a curriculum for the start of training from scratch); later epochs shuffle as usual "
                        "[per encoder; 0 with --init-from]")
    g.add_argument("--sortagrad-fraction", type=float, default=None,
                   help="SortaGrad's epochs read only the shortest training cuts that make up this fraction of "
                        "the audio (0 < F <= 1); the longer ones wait for the shuffled epochs [1]")
    g.add_argument("--num-workers", type=int, default=0, help="DataLoader workers (0: exact mid-epoch resume)")
    g.add_argument("--spec-augment", type=str2bool, default=None, help="lhotse SpecAugment [per encoder]")
    g.add_argument("--augment", default="",
                   help="On-the-fly acoustic augmentation of the training audio (zipformer_pc.data.augment): room "
                        "responses, noise and babble, telephone band, codecs, level and clipping, drawn per cut and "
                        "epoch; features are computed from the augmented audio. 'default', or name=value,... e.g. "
                        "'reverb=0.4,noise=0.4,phone=0.25,codec=0.1'; '' or none: off [off]")
    g.add_argument("--augment-dir", default="",
                   help="Where the augmentation's simulated room responses and generated noises are kept (made on "
                        "first use; recorded room responses added as wav files to DIR/rirs join the pool) "
                        "[EXP_DIR/augment]")
    g.add_argument("--musan-cuts", default="",
                   help="Noise and music cuts (prepare.sh --musan true: data/musan/musan_cuts.jsonl.gz) mixed into "
                        "the training cuts on the fly, as icefall's LibriSpeech recipe does (lhotse's CutSet.mix, "
                        "CutMix's operation); the mixed cuts' features are computed from the mixed audio "
                        "(zipformer_pc.data.musan) [off]")
    g.add_argument("--musan-prob", type=float, default=0.5, help="Share of the training cuts mixed with MUSAN")
    g.add_argument("--musan-snr", default="10,20", help="Signal-to-noise ratio range of the MUSAN mix, dB")
    g.add_argument("--freq-warp", type=float, default=0.0,
                   help="Vocal tract length perturbation: each training utterance's mel bins are warped by a "
                        f"factor drawn from [1 - W, 1 + W] (0 <= W < {MAX_FREQ_WARP:g}; 0.1 is usual); 0: none")
    g.add_argument("--punct-proportion", type=float, default=None,
                   help="Paper's random per-batch split: fraction of utterances keeping P in each batch")
    g.add_argument("--use-auto-punct", type=str2bool, default=False, help="Train P on the P' references")

    g = p.add_argument_group("model")
    g.add_argument("--model-type", choices=MODEL_TYPES, default="conditioned")
    g.add_argument("--encoder", default="tiny", choices=sorted(ENCODER_CONFIGS), help="Encoder configuration")
    for f in ENCODER_FLAGS:
        g.add_argument("--" + f.replace("_", "-"), default=None, help="Override of the encoder config (comma list)")
    g.add_argument("--causal", type=str2bool, default=True)
    g.add_argument("--dropout", type=float, default=None,
                   help="Encoder dropout (masks shared over time) [per encoder: tiny 0, paper 0.1]")
    g.add_argument("--feature-mask-prob", type=float, default=None,
                   help="Per-frame probability of masking the channels above encoder_unmasked_dim at each "
                        "stack input in training (config default: 0.15; 0: off)")
    g.add_argument("--convnext-hidden-ratio", type=int, default=None,
                   help="Expansion of the front end's ConvNeXt MLP (config default: 3; 0: no ConvNeXt block)")
    g.add_argument("--front-end-channels", type=int, default=None,
                   help="Channels of the front end's third convolution (config default: 128 (paper) / 64 "
                        "(tiny); a count other than 128 needs --convnext-hidden-ratio 0)")
    g.add_argument("--decoder-dim", type=int, default=None, help="Default: 512 (paper) / 256 (tiny)")
    g.add_argument("--joiner-dim", type=int, default=None, help="Default: 512 (paper) / 256 (tiny)")
    g.add_argument("--context-size", type=int, default=None,
                   help="Tokens the predictor sees (default 2; with --init-from: the init model's, or a larger "
                        "number, which widens a copied predictor: the older tokens' taps start at zero, so "
                        "training starts from the init model's outputs)")
    g.add_argument("--mode-dim", type=int, default=12, help="Mode embedding size (conditioned)")
    g.add_argument("--embed-init-std", type=float, default=None,
                   help="Initial std of the predictor's token and mode embeddings (1.0 as icefall; 0: "
                        "(decoder_dim - mode_dim)^-0.5, the earlier default) [per encoder]")
    g.add_argument("--init-from", default=None,
                   help="Start from the weights of this checkpoint (e.g. a norm model's epoch-E.pt) instead of a "
                        "random initialisation: fine-tuning. Ignored when resuming.")
    g.add_argument("--freeze-encoder", type=str2bool, default=False,
                   help="Train the predictor(s), joiner(s) and projections only: the encoder (e.g. from --init-from) "
                        "runs in eval mode without gradients, which makes a step several times cheaper")
    g.add_argument("--encoder-cache", default=None,
                   help="With --freeze-encoder true: the frozen encoder's outputs for the training cuts, computed "
                        "once by python -m zipformer_pc.training.encoder_cache from the --init-from checkpoint")
    g.add_argument("--init-modules", default="encoder",
                   help="Comma list of what --init-from copies: encoder, decoders, joiners, simple_am_proj, "
                        "simple_lm_proj, ctc_output, sentence_end_output; or all of them: all. Heads are matched by "
                        "name, or all from a single-head model.")

    g = p.add_argument_group("loss")
    g.add_argument("--alpha", type=float, default=0.5, help="Weight of the punctuated loss L_P")
    g.add_argument("--loss", choices=["auto", "pruned", "full"], default=None,
                   help="auto / pruned: the pruned RNN-T, k2's when k2 imports, else the plain-PyTorch one "
                        "(zipformer_pc.model.pruned_rnnt); full: torchaudio's full RNN-T lattice [per encoder]")
    g.add_argument("--prune-range", type=int, default=5)
    g.add_argument("--lattice-dtype", choices=["float64", "float32"], default="float64",
                   help="Precision of the lattice recursions of the plain-PyTorch pruned loss (without k2): "
                        "float32 agrees with float64 to about 1e-6 in the loss and 1e-3 in the gradients, and "
                        "halves their memory (docs/gpu-check.md)")
    g.add_argument("--lm-scale", type=float, default=0.25)
    g.add_argument("--am-scale", type=float, default=0.0)
    g.add_argument("--simple-loss-scale", type=float, default=0.5)
    g.add_argument("--warm-step", type=int, default=None,
                   help="Batches over which the pruned loss ramps up and the simple loss down [per encoder]")
    g.add_argument("--ctc-loss-scale", type=float, default=None,
                   help="Weight of an auxiliary CTC loss on the encoder output (its references: --ctc-targets), as a "
                        "regulariser; decoding and export ignore the CTC output. 0: the model has no CTC output "
                        "[per encoder]")
    g.add_argument("--ctc-targets", choices=CTC_TARGETS, default="auto",
                   help="References of the auxiliary CTC loss: auto (N; P for punct), N, or P (the utterances with "
                        "P: the encoder itself must then carry case and marks)")
    g.add_argument("--sentence-end-loss-scale", type=float, default=0.0,
                   help="Weight of an auxiliary loss that classifies, on the encoder's last frames, the mark ending "
                        "each utterance's P reference ('.' or '?'), so that the encoder carries the sentence type "
                        "where the mark is written; decoding and export ignore its output. 0: none")

    g = p.add_argument_group("optimization")
    g.add_argument("--optimizer", choices=["scaled_adam", "adamw"], default="scaled_adam")
    g.add_argument("--base-lr", type=float, default=None,
                   help="[per encoder]; on resumption, --base-lr, --lr-batches and --lr-epochs given on the command "
                        "line replace the checkpoint's (e.g. to start decaying a long run)")
    g.add_argument("--lr-batches", type=float, default=None, help="Eden's batch decay constant [per encoder]")
    g.add_argument("--lr-epochs", type=float, default=None, help="Eden's epoch decay constant [per encoder]")
    g.add_argument("--warmup-batches", type=float, default=None, help="Linear LR warm-up [per encoder]")
    g.add_argument("--lr-plateau-factor", type=float, default=1.0,
                   help="Multiply the learning rate by this when the validation loss (N + P per utterance) has "
                        "not improved by --lr-plateau-threshold over its best in --lr-plateau-patience "
                        "validations in a row (1: off). The cuts survive resumption and compose with a new "
                        "--base-lr")
    g.add_argument("--lr-plateau-patience", type=int, default=3,
                   help="Validations without improvement before a cut")
    g.add_argument("--lr-plateau-threshold", type=float, default=0.01,
                   help="Relative improvement of the best validation loss that counts as one")
    g.add_argument("--lr-cooldown-batches", type=int, default=0,
                   help="End a run of --max-batches batches with a linear fall of the learning rate to 0 over "
                        "its last N batches (0: off); applies to this call, not kept in the checkpoint")
    g.add_argument("--lr-cooldown-minutes", type=float, default=None,
                   help="The same for a run of --max-minutes minutes: a linear fall to 0 over its last M minutes "
                        "of training time (0: off) [per encoder: tiny, the last third of --max-minutes unless "
                        "--lr-cooldown-batches is given; paper, 0]")
    g.add_argument("--dtype", choices=TRAIN_DTYPES, default=None,
                   help="Precision of the forward pass: fp32; fp16, mixed precision under torch.autocast with "
                        "a GradScaler (CUDA only: float32 on a CPU); bf16, autocast to bfloat16 without loss "
                        "scaling (CUDA, and CPUs). Weights, optimizer and the transducer/CTC losses stay in "
                        "float32 [fp32, or fp16 with --use-fp16 true]")
    g.add_argument("--use-fp16", type=str2bool, default=None,
                   help="The older name of --dtype fp16 (true) / fp32 (false), kept for compatibility")
    g.add_argument("--initial-grad-scale", type=float, default=1.0,
                   help="fp16: the GradScaler's first loss scale (1.0 as icefall: the first updates are not "
                        "skipped while the scale halves down from torch's 65536); every 100 batches a scale "
                        "below 8 is doubled, every 400 one below 32 (zipformer_pc.training.guards)")
    g.add_argument("--grad-scale-floor", type=float, default=1e-5,
                   help="fp16: a loss scale below this ends the run with a bad-model-B.pt checkpoint and a "
                        "message (float16 overflows at any scale)")
    g.add_argument("--inf-check", type=str2bool, default=False,
                   help="Hooks on every module that log, once per batch, the first module whose output (or its "
                        "output's gradient) is not finite, with its input statistics; slow, for debugging")
    g.add_argument("--scan-oom", type=str2bool, default=None,
                   help="Before training, one forward and backward on the epoch's largest batches (by padded "
                        "seconds, padded tokens and lattice size, full attention), to fail at once with a smaller "
                        "--max-duration to try instead of after hours [true on CUDA; a CPU skips it]")

    g = p.add_argument_group("run")
    g.add_argument("--exp-dir", required=True)
    g.add_argument("--num-epochs", type=int, default=30)
    g.add_argument("--start-epoch", type=int, default=1, help="Resume from epoch-(N-1).pt")
    g.add_argument("--start-batch", type=int, default=0, help="Resume from checkpoint-N.pt (mid-epoch)")
    g.add_argument("--save-every-n", type=int, default=2000)
    g.add_argument("--keep-last-k", type=int, default=30)
    g.add_argument("--average-period", type=int, default=200,
                   help="Fold the per-batch weight sums into the running average every N batches (and at every "
                        "checkpoint); the average is exact over every batch whatever N")
    g.add_argument("--save-every-minutes", type=float, default=0,
                   help="Also write checkpoint-B.pt every M minutes of training time (0: off); for learning curves")
    g.add_argument("--max-minutes", type=float, default=0,
                   help="Stop after M minutes of training time (validation excluded; 0: no limit)")
    g.add_argument("--valid-interval", type=int, default=3000, help="Validate every N batches (and each epoch end)")
    g.add_argument("--log-interval", type=int, default=50)
    g.add_argument("--valid-at-epoch-end", type=str2bool, default=True,
                   help="Compute the validation loss at the end of every epoch (short fine-tuning runs skip it)")
    g.add_argument("--max-batches", type=int, default=0, help="Stop after N training batches in total (0: no limit)")
    g.add_argument("--world-size", type=int, default=1)
    g.add_argument("--master-port", type=int, default=12354)
    g.add_argument("--num-threads", type=int, default=2, help="torch CPU threads per process")
    g.add_argument("--seed", type=int, default=42)
    g.add_argument("--tensorboard", type=str2bool, default=True)
    return p


def last_third_of_budget(args) -> float:
    """The tiny default of ``--lr-cooldown-minutes``: the last third of a
    ``--max-minutes`` budget (0 without one, or when the run cools down by
    batches instead)."""
    return 0.0 if args.lr_cooldown_batches else args.max_minutes / 3


# Training defaults per --encoder, for the options marked [per encoder] (a
# function of the parsed options gives its value from them); an option given
# on the command line wins.  "paper" keeps icefall's LibriSpeech settings (GPU
# batches of minutes of audio, tens of thousands of steps); "tiny" has the
# settings measured to learn fastest on a 2-core CPU
# (benchmarks/learning_curve.py; docs/cpu-training.md).
TRAINING_DEFAULTS: Dict[str, Dict[str, Any]] = {
    "paper": dict(max_duration=200.0, spec_augment=True, embed_init_std=1.0, loss="auto", warm_step=2000,
                  dropout=0.1, ctc_loss_scale=0.0, base_lr=0.045, lr_batches=7500.0, lr_epochs=3.5, warmup_batches=500.0,
                  sortagrad_epochs=0, sortagrad_fraction=1.0, lr_cooldown_minutes=0.0),
    "tiny": dict(max_duration=30.0, spec_augment=False, embed_init_std=1.0, loss="pruned", warm_step=2000,
                 dropout=0.0, ctc_loss_scale=0.3, base_lr=0.045, lr_batches=1000.0, lr_epochs=100.0, warmup_batches=50.0,
                 sortagrad_epochs=1, sortagrad_fraction=1.0, lr_cooldown_minutes=last_third_of_budget),
}
# Defaults that only concern training from scratch: with --init-from they are 0
# (a fine-tuning run reads its data shuffled from the first batch).
FROM_SCRATCH_ONLY = ("sortagrad_epochs",)


def apply_training_defaults(args) -> Dict[str, Any]:
    """Fill the options left at None from ``TRAINING_DEFAULTS[args.encoder]``; returns what was filled."""
    table = TRAINING_DEFAULTS.get(args.encoder, TRAINING_DEFAULTS["paper"])
    filled = {}
    for k, v in table.items():
        if getattr(args, k) is None:
            if k in FROM_SCRATCH_ONLY and getattr(args, "init_from", None):
                v = 0
            elif callable(v):
                v = v(args)
            setattr(args, k, v)
            filled[k] = v
    return filled


SCHEDULE_OPTIONS = ("base_lr", "lr_batches", "lr_epochs")


def total_valid_loss(v: Dict[str, float]) -> float:
    """The validation loss the plateau rule and ``best_valid_loss`` follow: L_N + L_P per
    utterance, over the modes the validation set has (NaN when it has neither)."""
    finite = [x for x in (v["valid_loss_n"], v["valid_loss_p"]) if not math.isnan(x)]
    return sum(finite) if finite else math.nan


def plateau_cut(counters: Dict[str, Any], loss: float, patience: int, threshold: float) -> bool:
    """Record a validation loss in ``counters`` (``plateau_best``, ``plateau_waits``);
    True when it is the ``patience``-th in a row that is not below the best by the
    relative ``threshold``, i.e. when the learning rate is to be cut (the count
    restarts then).  A NaN loss (nothing validated) changes nothing."""
    if math.isnan(loss):
        return False
    if loss < counters["plateau_best"] * (1.0 - threshold):
        counters["plateau_best"] = loss
        counters["plateau_waits"] = 0
        return False
    counters["plateau_waits"] += 1
    if counters["plateau_waits"] < patience:
        return False
    counters["plateau_waits"] = 0
    return True


def resume_schedule(scheduler: Eden, args) -> List[str]:
    """On resumption the checkpoint's schedule holds, except for the options of
    ``SCHEDULE_OPTIONS`` given on this command line (not filled from the
    defaults): those replace the checkpoint's values, so a long run can start
    decaying its learning rate when its validation loss stops improving.
    Returns the changes as ``"option old -> new"`` strings."""
    given = [k for k in SCHEDULE_OPTIONS if k not in getattr(args, "defaults_filled", {})]
    changes = []
    for k in given:
        new = float(getattr(args, k))
        if k == "base_lr":
            old = scheduler.base_lrs[0]
            if old != new:
                scheduler.base_lrs = [new for _ in scheduler.base_lrs]
                for group in scheduler.optimizer.param_groups:
                    group["base_lr"] = new
        else:
            old = getattr(scheduler, k)
            setattr(scheduler, k, new)
        if old != new:
            changes.append(f"--{k.replace('_', '-')} {old:g} -> {new:g}")
    scheduler.step_batch(scheduler.batch)
    return changes


# Options counted from the start of training, with the value a checkpoint
# written before the option existed was trained with.
CHECKPOINT_COUNTERS = (("warm_step", None), ("sortagrad_epochs", 0), ("sortagrad_fraction", 1.0))


def keep_checkpoint_counters(args, saved_args: Dict[str, Any]) -> List[str]:
    """On resumption, the options of ``CHECKPOINT_COUNTERS`` left to the
    defaults take the checkpoint's values: the loss warm-up counts batches from
    the start of training and SortaGrad's sorted epochs from its first epoch, so
    a fine-tuning run started with ``--warm-step 0`` must not warm up again and a
    run started before SortaGrad was a default resumes shuffled.  A value given
    on the command line wins.  Returns the changes as ``"--option V (the default
    is D)"`` strings."""
    filled = getattr(args, "defaults_filled", {})
    changes = []
    for k, missing in CHECKPOINT_COUNTERS:
        saved = saved_args.get(k, missing) if saved_args else None
        if k in filled and saved is not None and saved != getattr(args, k):
            changes.append(f"--{k.replace('_', '-')} {saved} (the default is {getattr(args, k)})")
            setattr(args, k, saved)
    return changes


def resolve_dtype(args) -> str:
    """``--dtype``, or when it is not given, what ``--use-fp16`` (its older name) says: true is
    fp16, false or absent fp32.  Sets both options to agree (``args.use_fp16`` is then True
    exactly for fp16) and returns the dtype; ``ValueError`` when the two contradict each other."""
    dtype, fp16 = getattr(args, "dtype", None), getattr(args, "use_fp16", None)
    if dtype is None:
        dtype = "fp16" if fp16 else "fp32"
    elif dtype not in TRAIN_DTYPES:
        raise ValueError(f"--dtype must be one of {', '.join(TRAIN_DTYPES)}, not {dtype!r}")
    elif fp16 is not None and bool(fp16) != (dtype == "fp16"):
        raise ValueError(f"--use-fp16 {str(bool(fp16)).lower()} contradicts --dtype {dtype} (--use-fp16 true is "
                         "--dtype fp16, false is fp32): give one of them")
    args.dtype, args.use_fp16 = dtype, dtype == "fp16"
    return dtype


def autocast_dtype(dtype: str, device: torch.device) -> Optional[torch.dtype]:
    """The dtype the forward pass is autocast to for ``--dtype`` on ``device``; None: no
    autocast (float32).  fp16 needs CUDA (on a CPU it trains in float32, as --use-fp16 always
    did); bf16 runs on CUDA and on a CPU, whose autocast supports bfloat16."""
    if dtype == "fp16" and device.type == "cuda":
        return torch.float16
    if dtype == "bf16" and device.type in ("cuda", "cpu"):
        return torch.bfloat16
    return None


def autocast(dtype: str, device: torch.device):
    """The context the forward pass and losses run in at ``--dtype`` on ``device``: torch.autocast
    to :func:`autocast_dtype` (the losses cast their inputs to float32 inside it:
    zipformer_pc.model.loss), or nothing for float32."""
    amp = autocast_dtype(dtype, device)
    return torch.autocast(device_type=device.type, dtype=amp) if amp is not None else contextlib.nullcontext()


def make_grad_scaler(dtype: str, device: torch.device, init_scale: float = 1.0) -> torch.amp.GradScaler:
    """The loss scaler of ``--dtype``: enabled for fp16 autocast only (bfloat16 has float32's
    exponent range and needs none); a disabled one passes the loss and the step through.
    ``init_scale``: ``--initial-grad-scale`` (1.0, icefall's; the Trainer's
    :class:`~zipformer_pc.training.guards.GradScaleGuard` grows a small scale)."""
    return torch.amp.GradScaler("cuda", init_scale=init_scale,
                                enabled=autocast_dtype(dtype, device) == torch.float16)


def setup_device(rank: int, world_size: int, master_port: int) -> torch.device:
    """The training device of process ``rank``, and the process group of a DDP run.  On CUDA,
    ``torch.cuda.set_device(rank)`` comes first, before anything touches CUDA: NCCL's
    communicator, the caching allocator and any tensor made with ``device="cuda"`` then live on
    this rank's GPU, not all on GPU 0 (which would hold an extra context per rank)."""
    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.set_device(rank)
    if world_size > 1:
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(master_port))
        dist.init_process_group("nccl" if cuda else "gloo", rank=rank, world_size=world_size)
    return torch.device("cuda", rank) if cuda else torch.device("cpu")


def fix_random_seed(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)


def model_config_from_args(args, vocab_size: int, with_simple_proj: bool) -> Dict[str, Dict[str, object]]:
    flags = (*ENCODER_FLAGS, "dropout", "feature_mask_prob", "convnext_hidden_ratio", "front_end_channels")
    overrides: Dict[str, Any] = {f: getattr(args, f) for f in flags if getattr(args, f) is not None}
    overrides["causal"] = args.causal
    head = HeadConfig(
        model_type=args.model_type,
        vocab_size=vocab_size,
        decoder_dim=args.decoder_dim or head_dim(args.encoder),
        joiner_dim=args.joiner_dim or head_dim(args.encoder),
        context_size=HeadConfig.context_size if args.context_size is None else args.context_size,
        mode_dim=args.mode_dim,
        with_simple_proj=with_simple_proj,
        ctc=args.ctc_loss_scale > 0,
        sentence_end=args.sentence_end_loss_scale > 0,
        embed_init_std=args.embed_init_std if args.embed_init_std > 0 else None,
    )
    return make_model_config(args.encoder, overrides, head)


def init_modules(args) -> List[str]:
    """The module groups ``--init-modules`` names (``all``: every group a model may have)."""
    if args.init_modules.strip() == "all":
        return list(INIT_MODULES)
    return [m.strip() for m in args.init_modules.split(",") if m.strip()]


def model_config_for_init(args, vocab_size: int, with_simple_proj: bool) -> Dict[str, Dict[str, object]]:
    """The model config of a fine-tuning start (``--init-from``): the sizes of the init checkpoint's
    encoder and predictor/joiner, so that its weights fit, whatever ``--encoder`` says; encoder options
    given explicitly on the command line still apply (a mismatch is then reported by the copy).  The
    model type, vocabulary, CTC output and regularisation come from the command line.  A tokenizer other
    than the init's is refused: its predictor and joiner would not mean the same tokens."""
    try:
        init = load_checkpoint(Path(args.init_from))
    except FileNotFoundError as e:
        raise SystemExit(f"--init-from: {e}")
    if "model_config" not in init:
        raise SystemExit(f"--init-from {args.init_from}: no model_config in it (not a checkpoint of this project)")
    src = init["model_config"]
    if src["head"]["vocab_size"] != vocab_size:
        raise SystemExit(
            f"--init-from {args.init_from} has {src['head']['vocab_size']} tokens, --bpe-model {args.bpe_model} has "
            f"{vocab_size}: fine-tune with the tokenizer the init model was trained with"
        )
    config = model_config_from_args(args, vocab_size, with_simple_proj)
    explicit = {f: getattr(args, f) for f in (*ENCODER_FLAGS, "convnext_hidden_ratio", "front_end_channels")
                if getattr(args, f) is not None}
    encoder = dict(src["encoder"])
    for f in ("dropout", "feature_mask_prob", "causal"):
        encoder[f] = config["encoder"][f]
    if explicit:
        from zipformer_pc.model.zipformer import EncoderConfig

        encoder = asdict(EncoderConfig(**{**encoder, **explicit}))
    config["encoder"] = encoder
    for f in ("decoder_dim", "joiner_dim", "context_size", "mode_dim"):
        config["head"][f] = src["head"][f]
    if args.context_size is not None and args.context_size != src["head"]["context_size"]:
        if args.context_size < src["head"]["context_size"] and "decoders" in init_modules(args):
            raise SystemExit(
                f"--context-size {args.context_size} with --init-from {args.init_from} (context "
                f"{src['head']['context_size']}): a copied predictor can only be widened (or leave decoders out "
                f"of --init-modules: a fresh predictor)"
            )
        config["head"]["context_size"] = args.context_size
    logging.info(f"--init-from {args.init_from}: its encoder and predictor/joiner sizes are used "
                 f"(encoder {json.dumps(encoder)})")
    return config


def load_encoder_cache(args) -> Optional[EncoderCache]:
    """``--encoder-cache``: the frozen encoder's outputs for every training cut (checked)."""
    if not args.encoder_cache:
        return None
    if not (args.freeze_encoder and args.init_from):
        raise SystemExit("--encoder-cache needs --freeze-encoder true and the --init-from checkpoint it was made from")
    try:
        cache = EncoderCache(Path(args.encoder_cache), Path(args.init_from))
        from lhotse import load_manifest_lazy

        cache.check_covers([c.id for c in load_manifest_lazy(args.train_cuts)])
    except (ValueError, FileNotFoundError) as e:
        raise SystemExit(f"--encoder-cache: {e}")
    logging.info(f"Encoder outputs of the training cuts come from {args.encoder_cache} ({len(cache)} cuts; chunk "
                 f"{cache.chunk_size}, left context {cache.left_context_frames}): the encoder does not run in training")
    return cache


def setup_run_logging(exp_dir: Path, rank: int) -> None:
    """This rank's log file EXP_DIR/log/log-train-TIME-RANK, and rank 0's lines on stderr too."""
    log_dir = exp_dir / "log"
    log_dir.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now().strftime("%Y-%m-%d-%H-%M-%S")
    setup_logging(tag=f"rank {rank}", log_file=log_dir / f"log-train-{stamp}-{rank}", stderr=rank == 0, force=True)


def compute_loss(model, batch, args, loss_cfg: LossConfig, device, batch_idx: Optional[int],
                 encoder_cache: Optional[EncoderCache] = None):
    feats = batch["features"].to(device)
    lens = batch["feature_lens"].to(device)
    enc = None
    if encoder_cache is not None:
        out, out_lens = encoder_cache.lookup(batch["cut_ids"], batch["feature_lens"])
        enc = (out.to(device), out_lens.to(device))
    with autocast(args.dtype, device):
        return model(feats, lens, batch["tokens_n"], batch["tokens_p"], alpha=args.alpha,
                     loss_cfg=loss_cfg, batch_idx=batch_idx, ctc_scale=args.ctc_loss_scale, encoder_out=enc,
                     ctc_targets=args.ctc_targets, sentence_end_scale=args.sentence_end_loss_scale,
                     end_classes=sentence_end_classes(batch["texts_p"]))


def compute_validation_loss(model, valid_dl, args, loss_cfg, device) -> Dict[str, float]:
    """Per-mode validation loss (per utterance) over the whole validation set."""
    was_training = model.training
    model.eval()
    tot = {"loss_n": 0.0, "loss_p": 0.0, "num_n": 0.0, "num_p": 0.0}
    with torch.no_grad():
        for batch in valid_dl:
            out = compute_loss(model, batch, args, loss_cfg, device, None)
            for k in ("n", "p"):
                n = float(out[f"num_{k}"])
                tot[f"loss_{k}"] += float(out[f"loss_{k}"]) * n
                tot[f"num_{k}"] += n
    if dist.is_available() and dist.is_initialized():
        # on the training device: NCCL reduces CUDA tensors only (float64 is fine there)
        t = torch.tensor([tot["loss_n"], tot["loss_p"], tot["num_n"], tot["num_p"]], dtype=torch.float64,
                         device=device)
        dist.all_reduce(t)
        tot = dict(zip(("loss_n", "loss_p", "num_n", "num_p"), t.tolist()))
    model.train(was_training)
    res = {f"valid_loss_{k}": (tot[f"loss_{k}"] / tot[f"num_{k}"] if tot[f"num_{k}"] else float("nan")) for k in ("n", "p")}
    res["valid_num_n"], res["valid_num_p"] = tot["num_n"], tot["num_p"]
    return res


def load_resume_checkpoint(exp_dir: Path, args) -> Optional[Dict[str, Any]]:
    """The checkpoint ``--start-batch`` / ``--start-epoch`` resume from, or None for a fresh start."""
    if args.start_batch > 0:
        ckpt = load_checkpoint(exp_dir / f"checkpoint-{args.start_batch}.pt")
        if "interpolated" in ckpt:
            raise SystemExit(f"{exp_dir}/checkpoint-{args.start_batch}.pt holds interpolated weights and no "
                             "optimizer state (zipformer_pc.training.interpolate): not a run to resume; "
                             "start a new run from it with --init-from")
        return ckpt
    if args.start_epoch > 1:
        return load_checkpoint(exp_dir / f"epoch-{args.start_epoch - 1}.pt")
    return None


def get_model(args, ckpt: Optional[Dict[str, Any]], vocab_size: int, with_simple_proj: bool):
    """The model and its config: the checkpoint's when resuming, else from the options, with
    ``--init-from`` weights for a fresh start (fine-tuning)."""
    if ckpt is not None:
        model_config = ckpt["model_config"]
    elif args.init_from:
        model_config = model_config_for_init(args, vocab_size, with_simple_proj)
    else:
        model_config = model_config_from_args(args, vocab_size, with_simple_proj)
    if model_config["head"]["vocab_size"] != vocab_size:
        raise SystemExit(f"The model has {model_config['head']['vocab_size']} tokens, {args.bpe_model} has {vocab_size}")
    try:
        model = build_model(model_config)
    except ValueError as e:
        raise SystemExit(f"Model options: {e}")
    if ckpt is not None:
        model.load_state_dict(ckpt["model"])
        load_whiten_state(model, ckpt.get("whiten_state", {}))
    elif args.init_from:
        try:
            got = init_from_checkpoint(model, Path(args.init_from), init_modules(args))
        except (ValueError, FileNotFoundError) as e:
            raise SystemExit(f"--init-from: {e}")
        logging.info(f"Initialised {len(got['copied'])} tensors from {args.init_from} "
                     f"(--init-modules {args.init_modules}); {len(got['kept'])} of those modules keep their "
                     f"random initialisation" + (f": {', '.join(got['kept'])}" if got["kept"] else ""))
    return model, model_config


@dataclass
class Trainer:
    """What the training loop carries from batch to batch and into checkpoints."""

    args: Any
    rank: int
    world_size: int
    device: torch.device
    exp_dir: Path
    model: Transducer
    ddp_model: torch.nn.Module
    model_config: Dict[str, Any]
    model_avg: Optional[RunningAverage]
    optimizer: torch.optim.Optimizer
    scheduler: Eden
    scaler: Any
    loss_cfg: LossConfig
    train_dl: Any
    valid_dl: Any
    tb: Any = None
    encoder_cache: Optional[EncoderCache] = None
    # train_seconds: wall time spent in training batches (validation and
    # checkpoint writing excluded); audio_seconds: audio in the updates made
    counters: Dict[str, Any] = field(default_factory=lambda: {
        "batch_idx_train": 0, "optimizer_steps": 0, "skipped_nonfinite": 0, "skipped_no_reference": 0,
        "best_valid_loss": float("inf"), "train_seconds": 0.0, "audio_seconds": 0.0,
        "plateau_best": float("inf"), "plateau_waits": 0})
    next_save_minute: float = 0.0
    epoch: int = 0  # the epoch being trained (set by train_one_epoch), for bad-model checkpoints
    # fp16: icefall's loss-scale rules (made from --grad-scale-floor when the scaler is on)
    scale_guard: Optional[GradScaleGuard] = None
    inf_check: Optional[InfCheck] = None  # --inf-check true

    def __post_init__(self) -> None:
        if self.scale_guard is None and self.scaler.is_enabled():
            self.scale_guard = GradScaleGuard(self.scaler, floor=getattr(self.args, "grad_scale_floor", 1e-5),
                                              save=self.save_bad_model)

    def save_bad_model(self, suffix: str) -> Optional[str]:
        """``bad-model{suffix}-B.pt`` in the experiment directory (rank 0; others: None), a checkpoint
        of the state that made the loss scale collapse, to look at or to resume from."""
        if self.rank != 0:
            return None
        path = self.exp_dir / f"bad-model{suffix}-{self.counters['batch_idx_train']}.pt"
        save_checkpoint(path, self.state(self.epoch, with_sampler=False))
        return str(path)

    def time_cooldown(self, minutes: float) -> None:
        """``--lr-cooldown-minutes``: the rate of the next update, after ``minutes`` of training
        (set by each call, as ``--lr-cooldown-batches``: a resumed run without it has none)."""
        a = self.args
        left = (a.max_minutes - minutes) / a.lr_cooldown_minutes if a.lr_cooldown_minutes > 0 else 1.0
        self.scheduler.set_cooldown_fraction(min(1.0, max(0.0, left)))

    def state(self, cur_epoch: int, with_sampler: bool) -> Dict[str, Any]:
        """A checkpoint: weights, running average, model config, optimizer and loop state."""
        return {
            "model": self.model.state_dict(),
            **(self.model_avg.state_dict() if self.model_avg is not None
               else {"model_avg": None, "model_avg_batches": None}),
            "model_config": self.model_config,
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "grad_scaler": self.scaler.state_dict(),
            "sampler": self.train_dl.sampler.state_dict() if with_sampler else None,
            "cur_epoch": cur_epoch,
            "args": vars(self.args),
            "rng_state": {"torch": torch.get_rng_state(), "python": random.getstate(), "numpy": np.random.get_state()},
            "whiten_state": whiten_state(self.model),
            **self.counters,
        }

    def save_minute_after(self, minutes: float) -> float:
        """The next multiple of --save-every-minutes after ``minutes`` of training."""
        every = self.args.save_every_minutes
        return (int(minutes / every) + 1) * every

    def train_batch(self, batch: Dict[str, Any], b: int) -> Tuple[Dict[str, torch.Tensor], str]:
        """One training batch (number ``b``, counted from 1): the loss at ``--dtype``, its backward
        (scaled for fp16), the optimizer and schedule step and the running average.  Returns the
        model's outputs and what became of the batch: ``stepped``, ``nonfinite`` (skipped: a
        non-finite loss on some rank) or ``no_reference`` (skipped: no utterance has a reference
        for a trained mode).  Reads the device once (the skip flags, agreed by all ranks)."""
        args, counters = self.args, self.counters
        if self.inf_check is not None:
            self.inf_check.new_batch(b)
        out = compute_loss(self.ddp_model, batch, args, self.loss_cfg, self.device, b, self.encoder_cache)
        loss = out["loss"]
        # [finite, has a reference for a trained mode], built on the device and read in one sync
        flags = torch.stack([torch.isfinite(loss).all(), (out["num_n"] + out["num_p"]) > 0]).float()
        if self.world_size > 1:
            dist.all_reduce(flags, op=dist.ReduceOp.MIN)
        finite, has_reference = flags.tolist()
        if has_reference < 1:
            # e.g. a punct model on a batch whose cuts all lack P: nothing to learn
            status = "no_reference"
            counters["skipped_no_reference"] += 1
        elif finite < 1:
            status = "nonfinite"
            counters["skipped_nonfinite"] += 1
            logging.warning(f"Batch {b}: non-finite loss, skipped ({counters['skipped_nonfinite']} so far); "
                            f"cuts {batch['cut_ids'][:3]}...")
        else:
            self.scaler.scale(loss).backward()
            self.scheduler.step_batch(b)
            self.scaler.step(self.optimizer)
            self.scaler.update()
            status = "stepped"
            counters["optimizer_steps"] += 1
            if self.scale_guard is not None:
                self.scale_guard.check(b)  # may double a small scale, or end the run (GradScaleCollapsed)
        self.optimizer.zero_grad(set_to_none=True)
        if self.model_avg is not None:
            self.model_avg.step()
        return out, status

    def validate(self) -> Dict[str, float]:
        """The validation loss; with ``--lr-plateau-factor`` below 1, also the plateau rule
        (every rank sees the same loss, so all cut together)."""
        v = compute_validation_loss(self.ddp_model, self.valid_dl, self.args, self.loss_cfg, self.device)
        a = self.args
        if a.lr_plateau_factor < 1.0:
            loss = total_valid_loss(v)
            if plateau_cut(self.counters, loss, a.lr_plateau_patience, a.lr_plateau_threshold):
                self.scheduler.cut(a.lr_plateau_factor)
                if self.rank == 0:
                    logging.info(f"Plateau at batch {self.counters['batch_idx_train']}: validation loss "
                                 f"{loss:.3f}, not below the best {self.counters['plateau_best']:.3f} by "
                                 f"{a.lr_plateau_threshold:g} in {a.lr_plateau_patience} validation(s): "
                                 f"learning rate x{a.lr_plateau_factor:g} (scale {self.scheduler.scale:.4g}, "
                                 f"lr {self.scheduler.get_last_lr()[0]:.2e})")
        return v


def train_one_epoch(tr: Trainer, epoch: int) -> bool:
    """Train over one epoch (or what is left of it after a mid-epoch resumption); returns
    True when training must stop (--max-minutes, --max-batches)."""
    args, counters = tr.args, tr.counters
    tr.epoch = epoch
    tr.ddp_model.train()
    t_epoch = time.time()
    audio_sec = 0.0
    done = False
    t_batch = time.time()
    for batch in tr.train_dl:
        counters["batch_idx_train"] += 1
        b = counters["batch_idx_train"]
        out, status = tr.train_batch(batch, b)
        stepped = status == "stepped"
        if stepped:
            seconds = sum(batch["durations"])
            audio_sec += seconds
            counters["audio_seconds"] += seconds
        counters["train_seconds"] += time.time() - t_batch
        if tr.rank == 0 and stepped and b % args.log_interval == 0:
            log_batch(tr, epoch, b, out, audio_sec / (time.time() - t_epoch))
        minutes = counters["train_seconds"] / 60
        by_time = bool(args.save_every_minutes) and minutes >= tr.next_save_minute
        if by_time:
            tr.next_save_minute = tr.save_minute_after(minutes)
        if args.max_minutes and minutes >= args.max_minutes:
            done = by_time = True
        if tr.world_size > 1 and (args.save_every_minutes or args.max_minutes):
            # the ranks' clocks differ slightly: rank 0's decisions (and minutes) are everyone's
            t = torch.tensor([float(by_time), float(done), minutes], device=tr.device, dtype=torch.float64)
            dist.broadcast(t, src=0)
            by_time, done, minutes = bool(t[0].item()), bool(t[1].item()), float(t[2].item())
        if args.lr_cooldown_minutes:
            tr.time_cooldown(minutes)
        if done:
            logging.info(f"Reached --max-minutes {args.max_minutes} ({minutes:.1f} min of training): stopping")
        elif args.max_batches and b >= args.max_batches:
            logging.info(f"Reached --max-batches {args.max_batches}: stopping")
            done = True  # the last batch's checkpoint is saved below
        if b % args.valid_interval == 0 or by_time:
            v = tr.validate()
            if tr.rank == 0:
                logging.info(f"Validation at batch {b}: {v}")
                if tr.tb is not None:
                    for k in ("valid_loss_n", "valid_loss_p"):
                        tr.tb.add_scalar(f"valid/{k[6:]}", v[k], b)
        if (b % args.save_every_n == 0 or by_time or done) and tr.rank == 0:
            save_checkpoint(tr.exp_dir / f"checkpoint-{b}.pt", tr.state(epoch, with_sampler=True))
            remove_old_checkpoints(tr.exp_dir, args.keep_last_k)
            logging.info(f"Saved {tr.exp_dir / f'checkpoint-{b}.pt'}")
        if done:
            return True
        t_batch = time.time()

    v = tr.validate() if args.valid_at_epoch_end else None
    if tr.rank == 0:
        dur = time.time() - t_epoch
        said = v if v is not None else "off (--valid-at-epoch-end false)"
        logging.info(f"Epoch {epoch} done in {dur:.1f} s ({audio_sec / max(dur, 1e-9):.1f} s audio/s); validation: {said}")
        if v is not None:
            if tr.tb is not None:
                for k in ("valid_loss_n", "valid_loss_p"):
                    tr.tb.add_scalar(f"valid_epoch/{k[6:]}", v[k], epoch)
            vl = total_valid_loss(v)
            if not math.isnan(vl):
                counters["best_valid_loss"] = min(counters["best_valid_loss"], vl)
        save_checkpoint(tr.exp_dir / f"epoch-{epoch}.pt", tr.state(epoch, with_sampler=False))
        logging.info(f"Saved {tr.exp_dir / f'epoch-{epoch}.pt'}")
    return False


def log_batch(tr: Trainer, epoch: int, b: int, out: Dict[str, torch.Tensor], audio_per_second: float) -> None:
    lr = tr.scheduler.get_last_lr()[0]
    ctc = tr.args.ctc_loss_scale > 0
    end = tr.args.sentence_end_loss_scale > 0
    logging.info(
        f"Epoch {epoch}, batch {b}: loss {out['loss'].item():.4f} (L_N {out['loss_n'].item():.3f} over "
        f"{int(out['num_n'])} utts, L_P {out['loss_p'].item():.3f} over {int(out['num_p'])} utts"
        + (f", CTC {out['loss_ctc'].item():.3f}" if ctc else "")
        + (f", sentence end {out['loss_end'].item():.3f}" if end else "") + "), "
        f"lr {lr:.2e}, {audio_per_second:.1f} s audio/s"
    )
    if tr.tb is not None:
        tr.tb.add_scalar("train/loss", out["loss"].item(), b)
        tr.tb.add_scalar("train/loss_n", out["loss_n"].item(), b)
        tr.tb.add_scalar("train/loss_p", out["loss_p"].item(), b)
        if ctc:
            tr.tb.add_scalar("train/loss_ctc", out["loss_ctc"].item(), b)
        if end:
            tr.tb.add_scalar("train/loss_end", out["loss_end"].item(), b)
        tr.tb.add_scalar("train/num_p", float(out["num_p"]), b)
        tr.tb.add_scalar("train/lr", lr, b)


def run(rank: int, world_size: int, args) -> None:
    exp_dir = Path(args.exp_dir)
    exp_dir.mkdir(parents=True, exist_ok=True)
    setup_run_logging(exp_dir, rank)
    device = setup_device(rank, world_size, args.master_port)
    torch.set_num_threads(args.num_threads)
    fix_random_seed(args.seed + rank)
    resolve_dtype(args)
    amp = autocast_dtype(args.dtype, device)
    if args.dtype != "fp32" and amp is None:
        logging.warning(f"--dtype {args.dtype} needs CUDA; training in float32")
    elif amp == torch.bfloat16 and device.type == "cuda" and not torch.cuda.is_bf16_supported():
        logging.warning(f"--dtype bf16: {torch.cuda.get_device_name(device)} does not support bfloat16 natively "
                        "(emulated: slow); fp16 is the usual choice there")
    logging.info("Training started with parameters:\n" + json.dumps(vars(args), indent=1))
    filled = getattr(args, "defaults_filled", {})
    if filled:
        logging.info(f"Defaults of --encoder {args.encoder} used for: "
                     + ", ".join(f"--{k.replace('_', '-')} {v}" for k, v in filled.items()))

    tokenizer = Tokenizer(args.bpe_model)
    backend = resolve_backend(args.loss)
    ckpt = load_resume_checkpoint(exp_dir, args)
    if ckpt is not None:
        logging.info(f"Resuming from batch {ckpt['batch_idx_train']} (epoch {ckpt['cur_epoch']})")
        for change in keep_checkpoint_counters(args, ckpt.get("args") or {}):
            logging.info(f"Resuming with the checkpoint's {change}")
    loss_cfg = LossConfig(backend=backend, prune_range=args.prune_range, am_scale=args.am_scale,
                          lm_scale=args.lm_scale, simple_loss_scale=args.simple_loss_scale,
                          warm_step=args.warm_step, lattice_dtype=args.lattice_dtype)

    model, model_config = get_model(args, ckpt, tokenizer.vocab_size, backend == "pruned")
    if args.sentence_end_loss_scale > 0 and model.sentence_end_output is None:
        raise SystemExit("--sentence-end-loss-scale: the resumed model has no sentence-end output (it was trained "
                         "without the option); start a new run with --init-from to add it")
    if rank == 0:
        (exp_dir / "model_config.json").write_text(json.dumps(model_config, indent=1) + "\n")
        n_enc = count_parameters(model.encoder)
        logging.info(f"Parameters: {count_parameters(model):,} in total, {n_enc:,} in the encoder "
                     f"({args.model_type}, encoder {args.encoder if not args.init_from else 'of --init-from'}: "
                     f"{model_config['encoder']['num_encoder_layers']} layers per stack)")
    if args.freeze_encoder:
        model.freeze_encoder()
        logging.info("--freeze-encoder: the encoder is not trained")
    model.to(device)
    model_avg = RunningAverage(model, args.average_period) if rank == 0 else None
    if ckpt is not None and model_avg is not None:
        model_avg.load_state_dict(ckpt)
    ddp_model = model
    if world_size > 1:
        # a head may get no gradient in a batch (no P utterance on this rank)
        ddp_model = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[rank] if device.type == "cuda" else None, find_unused_parameters=True
        )

    optimizer = make_optimizer(args.optimizer, [p for p in model.parameters() if p.requires_grad], lr=args.base_lr)
    scheduler = Eden(optimizer, args.lr_batches, args.lr_epochs, warmup_batches=args.warmup_batches)
    scaler = make_grad_scaler(args.dtype, device, args.initial_grad_scale)
    logging.info(f"Precision: --dtype {args.dtype} (forward "
                 f"{f'autocast to {amp}' if amp is not None else 'in float32, no autocast'}, loss scaling "
                 f"{'on' if scaler.is_enabled() else 'off'})")
    if ckpt is not None:
        optimizer.load_state_dict(ckpt["optimizer"])
        scheduler.load_state_dict(ckpt["scheduler"])
        for change in resume_schedule(scheduler, args):
            logging.info(f"Resuming with a new schedule: {change}")
        if ckpt.get("grad_scaler"):
            scaler.load_state_dict(ckpt["grad_scaler"])
    # batch b (counted from 1) updates with the factor at b: the last of --max-batches gets 1/C of it
    scheduler.set_cooldown(args.lr_cooldown_batches, args.max_batches + 1)
    if args.lr_cooldown_batches and rank == 0:
        logging.info(f"Learning-rate cool-down: linear towards 0 over batches "
                     f"{args.max_batches - args.lr_cooldown_batches + 1}..{args.max_batches}")
    if args.lr_cooldown_minutes and rank == 0:
        logging.info(f"Learning-rate cool-down: linear towards 0 over the last {args.lr_cooldown_minutes:g} of "
                     f"{args.max_minutes:g} minutes of training")

    from lhotse import load_manifest_lazy

    data = PCAsrDataModule(tokenizer, args.max_duration, seed=args.seed, world_size=world_size, rank=rank)
    augment_cfg = parse_augment(args.augment)
    augmenter = None
    if augment_cfg is not None:
        augmenter = Augmenter(augment_cfg, Path(args.augment_dir or exp_dir / "augment"), seed=args.seed)
    musan = None
    if args.musan_cuts:
        musan = MusanMixer(Path(args.musan_cuts), prob=args.musan_prob, snr=parse_snr(args.musan_snr),
                           seed=args.seed)

    def train_loader(epoch: int):
        """The shuffled loader, or SortaGrad's shortest-first one for the first --sortagrad-epochs."""
        return data.train_dataloader(args.train_cuts, num_buckets=args.num_buckets,
                                     use_spec_augment=args.spec_augment, freq_warp=args.freq_warp,
                                     augment=augmenter,
                                     punct_proportion=args.punct_proportion,
                                     use_auto_punct=args.use_auto_punct, num_workers=args.num_workers,
                                     sort_by_duration=epoch <= args.sortagrad_epochs,
                                     sort_fraction=args.sortagrad_fraction,
                                     bucket_buffer_size=args.bucket_buffer_size,
                                     num_cuts_for_bins_estimate=args.num_cuts_for_bins_estimate, musan=musan)

    start_epoch = args.start_epoch if ckpt is None else ckpt["cur_epoch"] + (0 if args.start_batch > 0 else 1)
    train_dl = train_loader(start_epoch)
    valid_auto_punct = args.use_auto_punct and any_auto_punct(load_manifest_lazy(args.valid_cuts))
    if args.use_auto_punct and not valid_auto_punct and rank == 0:
        logging.info("The validation cuts carry no P' reference: mode P is validated on their true P")
    valid_dl = data.valid_dataloader(args.valid_cuts, use_auto_punct=valid_auto_punct)

    tb = None
    if rank == 0 and args.tensorboard:
        from torch.utils.tensorboard import SummaryWriter

        tb = SummaryWriter(log_dir=str(exp_dir / "tensorboard"))

    tr = Trainer(args=args, rank=rank, world_size=world_size, device=device, exp_dir=exp_dir, model=model,
                 ddp_model=ddp_model, model_config=model_config, model_avg=model_avg, optimizer=optimizer,
                 scheduler=scheduler, scaler=scaler, loss_cfg=loss_cfg, train_dl=train_dl, valid_dl=valid_dl, tb=tb,
                 encoder_cache=load_encoder_cache(args))
    if ckpt is not None:
        for k in tr.counters:
            tr.counters[k] = ckpt.get(k, tr.counters[k])
    if args.inf_check:
        tr.inf_check = InfCheck().register(model)
        logging.info("--inf-check: every module's output and gradient are checked for inf/NaN (slow)")
    if scan_oom_enabled(args, device):
        try:
            for row in oom_scan(tr, tokenizer):
                logging.info(f"OOM scan: the largest batch by {row['criterion']} fits, peak "
                             f"{row['peak_memory_gb']:.2f} GB ({row['batch']})")
        except OomScanFailed as e:
            raise SystemExit(f"OOM scan: {e}") from None
    elif args.scan_oom and device.type != "cuda":
        logging.info("--scan-oom: skipped on a CPU (it looks for CUDA out-of-memory errors)")
    if args.save_every_minutes > 0:
        tr.next_save_minute = tr.save_minute_after(tr.counters["train_seconds"] / 60)
    tr.time_cooldown(tr.counters["train_seconds"] / 60)
    # Restored right before the first batch (after the DataLoader iterator is
    # created, which draws from the torch RNG), so a resumed run draws the same
    # random numbers as an uninterrupted one.
    pending_rng = ckpt.get("rng_state") if (ckpt is not None and args.start_batch > 0) else None
    resume_sampler_state = ckpt.get("sampler") if (ckpt is not None and args.start_batch > 0) else None

    done = False
    if args.max_minutes and tr.counters["train_seconds"] / 60 >= args.max_minutes:
        logging.info(f"Reached --max-minutes {args.max_minutes} already "
                     f"({tr.counters['train_seconds'] / 60:.1f} min of training): nothing to do")
        done = True
    if args.max_batches and tr.counters["batch_idx_train"] >= args.max_batches:
        logging.info(f"Reached --max-batches {args.max_batches} already: nothing to do")
        done = True
    for epoch in range(start_epoch, args.num_epochs + 1):
        if done:
            break
        scheduler.step_epoch(epoch - 1)
        if args.sortagrad_epochs and epoch == args.sortagrad_epochs + 1 and epoch != start_epoch:
            train_dl = tr.train_dl = train_loader(epoch)  # SortaGrad is over: shuffled from here on
            logging.info(f"Epoch {epoch}: SortaGrad's {args.sortagrad_epochs} shortest-first epoch(s) are over")
        train_dl.sampler.set_epoch(epoch - 1)
        train_dl.dataset.set_epoch(epoch)
        if resume_sampler_state is not None:
            train_dl.sampler.load_state_dict(resume_sampler_state)
            resume_sampler_state = None
        if pending_rng is not None:
            tr.train_dl = RngRestoringLoader(train_dl, pending_rng)
            pending_rng = None
        done = train_one_epoch(tr, epoch)
        tr.train_dl = train_dl
    if rank == 0:
        c = tr.counters
        logging.info(f"Training done: {c['batch_idx_train']} batches, "
                     f"{c['skipped_nonfinite']} skipped for non-finite loss, "
                     f"{c['skipped_no_reference']} without a reference for the trained modes")
        if tb is not None:
            tb.close()
    if world_size > 1:
        dist.barrier()
        dist.destroy_process_group()


def scan_oom_enabled(args, device: torch.device) -> bool:
    """``--scan-oom``: on by default on CUDA; never on a CPU (no CUDA out-of-memory error to find)."""
    return device.type == "cuda" and args.scan_oom is not False


def cut_token_count(tokenizer: Tokenizer, use_auto_punct: bool = False):
    """``cut -> tokens of its longest reference`` (N or P), what the OOM scan sizes batches by."""
    from zipformer_pc.data.references import get_n, get_p

    def count(cut) -> int:
        sups = cut.supervisions
        n = len(tokenizer.encode(" ".join(get_n(s) for s in sups)))
        ps = [get_p(s, use_auto_punct) for s in sups]
        p = len(tokenizer.encode(" ".join(ps))) if sups and all(x is not None for x in ps) else 0
        return max(n, p)

    return count


def oom_scan(tr: "Trainer", tokenizer: Tokenizer) -> List[Dict[str, Any]]:
    """icefall's scan of pessimistic batches: the batches of this epoch largest by
    :data:`~zipformer_pc.training.guards.OOM_CRITERIA`, each made by the training dataset and
    run forward and backward once (full attention, the most memory) on the unwrapped model (no
    DDP collective: a rank that fails cannot hang the others), the gradients then dropped.  The
    RNG states are restored afterwards, so the run trains as it would have without the scan."""
    from lhotse import CutSet

    args, device, model = tr.args, tr.device, tr.model
    t0 = time.time()
    worst = pessimistic_batches(tr.train_dl.sampler, cut_token_count(tokenizer, args.use_auto_punct))
    logging.info(f"OOM scan: {len(worst)} pessimistic batches chosen from one epoch of the sampler in "
                 f"{time.time() - t0:.1f} s")
    rng = {"torch": torch.get_rng_state(), "python": random.getstate(), "numpy": np.random.get_state(),
           "cuda": torch.cuda.get_rng_state_all() if device.type == "cuda" else None}
    encoder = model.encoder
    chunks = encoder.chunk_sizes
    full = (-1, -1) if -1 in chunks else (max(chunks), -1)
    was_training = model.training
    model.train()
    encoder.draw_chunk_config = lambda: full  # an instance attribute over the method, removed below

    def run_step(shape) -> None:
        batch = tr.train_dl.dataset[CutSet.from_cuts(shape.cuts)]
        out = compute_loss(model, batch, args, tr.loss_cfg, device, args.warm_step, tr.encoder_cache)
        tr.scaler.scale(out["loss"]).backward()
        tr.optimizer.zero_grad(set_to_none=True)

    def free() -> None:
        tr.optimizer.zero_grad(set_to_none=True)
        if device.type == "cuda":
            torch.cuda.empty_cache()

    cuda = device.type == "cuda"
    try:
        return scan_for_oom(
            worst, run_step, args.max_duration,
            peak_memory=(lambda: torch.cuda.max_memory_allocated(device)) if cuda else (lambda: 0.0),
            reset_peak=(lambda: torch.cuda.reset_peak_memory_stats(device)) if cuda else (lambda: None),
            total_memory=torch.cuda.get_device_properties(device).total_memory if cuda else 0.0,
            free_memory=free)
    finally:
        del encoder.draw_chunk_config
        model.train(was_training)
        torch.set_rng_state(rng["torch"])
        random.setstate(rng["python"])
        np.random.set_state(rng["numpy"])
        if rng["cuda"] is not None:
            torch.cuda.set_rng_state_all(rng["cuda"])


class RngRestoringLoader:
    """A data loader whose iterator is created before the RNG states of a
    checkpoint are restored (creating it draws from the torch RNG), so a run
    resumed mid-epoch draws the same random numbers as an uninterrupted one."""

    def __init__(self, loader, rng_state: Dict[str, Any]) -> None:
        self.loader, self.rng_state = loader, rng_state
        self.sampler, self.dataset = loader.sampler, loader.dataset

    def __iter__(self):
        batches = iter(self.loader)
        setters = {"torch": torch.set_rng_state, "python": random.setstate, "numpy": np.random.set_state}
        for k, v in self.rng_state.items():
            setters[k](v)
        return batches


def lock_exp_dir(exp_dir: Path):
    """Hold an exclusive lock on ``exp_dir`` for the life of the returned file
    (the OS drops it when the process ends, however it ends): a second training
    on the same directory would write the same checkpoints, so it must refuse."""
    exp_dir.mkdir(parents=True, exist_ok=True)
    f = open(exp_dir / ".train.lock", "a+")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.seek(0)
        holder = f.read().strip() or "unknown"
        f.close()
        raise SystemExit(f"Another training is running on {exp_dir} (process {holder}): wait for it or stop it "
                         "(pgrep -af zipformer_pc.training.train), or give another --exp-dir")
    f.seek(0)
    f.truncate()
    f.write(f"{os.getpid()}\n")
    f.flush()
    return f


def main(argv=None) -> None:
    args = get_parser().parse_args(argv)
    args.defaults_filled = apply_training_defaults(args)
    try:
        resolve_dtype(args)
    except ValueError as e:
        raise SystemExit(str(e)) from None
    if not 0.0 <= args.alpha <= 1.0:
        raise SystemExit(f"--alpha must be in [0, 1], got {args.alpha}")
    if args.sortagrad_epochs < 0:
        raise SystemExit(f"--sortagrad-epochs must be >= 0, got {args.sortagrad_epochs}")
    if not 0 < args.sortagrad_fraction <= 1:
        raise SystemExit(f"--sortagrad-fraction must be in (0, 1], got {args.sortagrad_fraction}")
    if args.num_buckets < 1:
        raise SystemExit(f"--num-buckets must be >= 1, got {args.num_buckets}")
    if args.bucket_buffer_size < 1 or args.num_cuts_for_bins_estimate < 1:
        raise SystemExit("--bucket-buffer-size and --num-cuts-for-bins-estimate must be >= 1, got "
                         f"{args.bucket_buffer_size} and {args.num_cuts_for_bins_estimate}")
    if args.musan_cuts:
        if not Path(args.musan_cuts).is_file():
            raise SystemExit(f"--musan-cuts {args.musan_cuts} does not exist: prepare.sh --musan true makes it")
        if args.encoder_cache:
            raise SystemExit("--musan-cuts changes the audio every epoch: the encoder outputs of --encoder-cache "
                             "do not hold for it")
    try:
        parse_snr(args.musan_snr)
    except ValueError as e:
        raise SystemExit(str(e)) from None
    if not 0.0 <= args.musan_prob <= 1.0:
        raise SystemExit(f"--musan-prob must be in [0, 1], got {args.musan_prob}")
    if args.initial_grad_scale <= 0 or args.grad_scale_floor < 0:
        raise SystemExit(f"--initial-grad-scale must be > 0 and --grad-scale-floor >= 0, got "
                         f"{args.initial_grad_scale} and {args.grad_scale_floor}")
    if not 0.0 <= args.freq_warp < MAX_FREQ_WARP:
        raise SystemExit(f"--freq-warp must be in [0, {MAX_FREQ_WARP:g}), got {args.freq_warp}")
    try:
        augment = parse_augment(args.augment)
    except ValueError as e:
        raise SystemExit(str(e)) from None
    if augment is not None and args.encoder_cache:
        raise SystemExit("--augment changes the audio every epoch: the encoder outputs of --encoder-cache do not "
                         "hold for it")
    if args.freq_warp and args.encoder_cache:
        raise SystemExit("--freq-warp changes the features, --encoder-cache reads the encoder outputs of the "
                         "unchanged ones: give one of them")
    if not 0.0 < args.lr_plateau_factor <= 1.0:
        raise SystemExit(f"--lr-plateau-factor must be in (0, 1] (1: off), got {args.lr_plateau_factor}")
    if args.lr_plateau_patience < 1 or not 0.0 <= args.lr_plateau_threshold < 1.0:
        raise SystemExit("--lr-plateau-patience must be >= 1 and --lr-plateau-threshold in [0, 1), got "
                         f"{args.lr_plateau_patience} and {args.lr_plateau_threshold}")
    if not 0 <= args.lr_cooldown_batches <= args.max_batches:  # --max-batches 0 (no limit) allows no C > 0
        raise SystemExit("--lr-cooldown-batches C needs --max-batches N with N >= C > 0 (the last C batches of the "
                         f"run train at a rate falling linearly towards 0), got C={args.lr_cooldown_batches} "
                         f"and N={args.max_batches}")
    if args.lr_cooldown_minutes and not 0 < args.lr_cooldown_minutes <= args.max_minutes:
        raise SystemExit("--lr-cooldown-minutes M needs --max-minutes T with T >= M > 0 (the last M minutes of "
                         f"training at a rate falling linearly towards 0), got M={args.lr_cooldown_minutes:g} "
                         f"and T={args.max_minutes:g}")
    if args.lr_cooldown_minutes and args.lr_cooldown_batches:
        raise SystemExit("Give --lr-cooldown-batches or --lr-cooldown-minutes, not both")
    lock = lock_exp_dir(Path(args.exp_dir))
    try:
        if args.world_size > 1:
            mp.spawn(run, args=(args.world_size, args), nprocs=args.world_size, join=True)
        else:
            run(0, 1, args)
    finally:
        lock.close()


if __name__ == "__main__":
    main()
