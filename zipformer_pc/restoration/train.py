#!/usr/bin/env python3
"""Train the punctuation + truecasing restoration model (cascade baseline, P' references).

Usage:
  python -m zipformer_pc.restoration.train --train-cuts data/synth/fbank/synth_cuts_train.jsonl.gz \
      --valid-cuts data/synth/fbank/synth_cuts_dev.jsonl.gz \
      --test-sets dev=data/synth/fbank/synth_cuts_dev.jsonl.gz,test=data/synth/fbank/synth_cuts_test.jsonl.gz \
      --exp-dir egs/synth/exp/restore_default --lambda 0.5 --epochs 10 --seed 42

Training text: the P references of cut manifests (``--train-cuts``; cuts
without P are not used, so a ``_pF`` subset trains on its punctuated
fraction only) and/or plain text files, one utterance a line
(``--train-text``; raw punctuated text is fine, it goes through
zipformer_pc.text).  Lines without any word are skipped and counted.
Validation (checkpoint selection): ``--valid-cuts``/``--valid-text``, or,
without them, a ``--valid-fraction`` of the training lines chosen by a
seeded hash.  Never train on the ASR test text.

Writes to ``--exp-dir``: ``best-valid-loss.pt`` (the model used afterwards)
and ``last.pt`` (both reload alone), ``results.md`` (per-class precision /
recall / F1, macro F1, PuncER, CaseER on every ``--test-sets`` entry),
``results.json``, ``restored-NAME.txt`` (``id<TAB>restored P``) and
``log-train.txt``.
"""

import argparse
import hashlib
import json
import logging
import math
import random
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F

from zipformer_pc.logs import setup_logging
from zipformer_pc.restoration.data import (
    Encoded,
    RestorationBatch,
    build_mix_lexicon,
    encode_examples,
    make_batches,
    prepare_examples,
    read_cut_references,
    read_references,
    read_text_lines,
    train_sentencepiece,
)
from zipformer_pc.restoration.evaluate import evaluate_restorer, results_markdown
from zipformer_pc.restoration.model import (
    DEFAULT_MAX_WORDS,
    RestorationConfig,
    RestorationModel,
    Restorer,
    make_meta,
    num_parameters,
    save_restoration_checkpoint,
)
from zipformer_pc.runtime.restoration import LabeledLine, PieceEncoder, punct_classes
from zipformer_pc.text import parse_punct_args
from zipformer_pc.transcripts import write_transcripts


def restoration_loss(model: RestorationModel, batch: RestorationBatch, lam: float) -> Tuple[torch.Tensor, Dict[str, float]]:
    """``lam * L_case + (1 - lam) * L_punct`` (word-level cross entropies, mean over words).

    A term with weight 0 is not computed at all, so its head gets no gradient
    (``.grad`` stays None and the optimizer leaves it exactly at its init).
    """
    case_logits, punct_logits = model(batch.tokens, batch.lengths)
    loss = torch.zeros(())
    info: Dict[str, float] = {}
    if lam > 0:
        l_case = F.cross_entropy(case_logits[batch.rows, batch.first], batch.case)
        loss = loss + lam * l_case
        info["case"] = l_case.item()
    if lam < 1:
        l_punct = F.cross_entropy(punct_logits[batch.rows, batch.last], batch.punct)
        loss = loss + (1 - lam) * l_punct
        info["punct"] = l_punct.item()
    info["loss"] = loss.item()
    return loss, info


@dataclass
class RestorationTrainConfig:
    lam: float = 0.5
    epochs: int = 10
    batch_size: int = 32
    lr: float = 1e-3
    weight_decay: float = 0.01
    warmup_steps: int = 100
    grad_clip: float = 1.0
    seed: int = 42
    log_interval: int = 50

    def __post_init__(self) -> None:
        if not 0.0 <= self.lam <= 1.0:
            raise ValueError(f"lambda must be in [0, 1], got {self.lam}")
        if self.epochs < 1 or self.batch_size < 1:
            raise ValueError("epochs and batch_size must be positive")


def _lr_lambda(warmup: int, total: int):
    """Linear warm-up, then cosine decay to 10% of the peak at the last step."""

    def f(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = min(1.0, (step - warmup) / max(1, total - warmup))
        return 0.1 + 0.45 * (1 + math.cos(math.pi * progress))

    return f


def evaluate_loss(model: RestorationModel, items: Sequence[Encoded], lam: float, batch_size: int) -> Dict[str, float]:
    """Word-weighted mean losses (both terms always reported) over ``items``."""
    model.eval()
    totals: Counter = Counter()
    words = 0
    with torch.no_grad():
        for batch in make_batches(items, batch_size, None):
            case_logits, punct_logits = model(batch.tokens, batch.lengths)
            n = len(batch.rows)
            totals["case"] += F.cross_entropy(case_logits[batch.rows, batch.first], batch.case, reduction="sum").item()
            totals["punct"] += F.cross_entropy(punct_logits[batch.rows, batch.last], batch.punct, reduction="sum").item()
            words += n
    model.train()
    out = {k: v / max(1, words) for k, v in totals.items()}
    out["loss"] = lam * out["case"] + (1 - lam) * out["punct"]
    return out


def train_model(
    train_examples: Sequence[LabeledLine],
    valid_examples: Sequence[LabeledLine],
    spm_model: bytes,
    meta: Mapping[str, object],
    model_cfg: RestorationConfig,
    cfg: RestorationTrainConfig,
    exp_dir: Optional[Path] = None,
) -> Tuple[RestorationModel, Dict[str, object]]:
    """Train with AdamW; returns the model with the lowest validation loss (the last one without validation).

    With ``exp_dir``, writes ``last.pt`` after every epoch and ``best-valid-loss.pt``
    when the validation loss improves.  Reproducible for a given ``cfg.seed``
    (on one thread).
    """
    if not train_examples:
        raise ValueError("No training lines left after preparation")
    torch.manual_seed(cfg.seed)
    rng = random.Random(cfg.seed)
    encoder = PieceEncoder(spm_model)
    max_words = int(meta["max_words"])  # type: ignore[arg-type]
    train_items = encode_examples(train_examples, encoder, max_words)
    valid_items = encode_examples(valid_examples, encoder, max_words)
    model = RestorationModel(model_cfg)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    steps_per_epoch = math.ceil(len(train_items) / cfg.batch_size)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, _lr_lambda(cfg.warmup_steps, steps_per_epoch * cfg.epochs))
    logging.info(
        f"Training: {len(train_items)} lines ({sum(len(e.first) for e in train_items)} words), "
        f"{len(valid_items)} validation lines, {num_parameters(model) / 1e6:.2f}M parameters, "
        f"{steps_per_epoch} make_batches/epoch, lambda={cfg.lam}"
    )
    history: List[Dict[str, object]] = []
    best_loss = math.inf
    best_state = None
    step = 0
    start = time.time()
    for epoch in range(1, cfg.epochs + 1):
        running: Counter = Counter()
        n = 0
        for batch in make_batches(train_items, cfg.batch_size, rng):
            loss, info = restoration_loss(model, batch, cfg.lam)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            opt.step()
            sched.step()
            step += 1
            running.update(info)
            n += 1
            if step % cfg.log_interval == 0:
                avg = " ".join(f"{k}={v / n:.4f}" for k, v in sorted(running.items()))
                logging.info(f"epoch {epoch} step {step}: {avg} lr={sched.get_last_lr()[0]:.2e} "
                             f"({time.time() - start:.0f}s)")
        record: Dict[str, object] = {"epoch": epoch, "step": step, "seconds": round(time.time() - start, 1),
                                     "train": {k: v / max(1, n) for k, v in running.items()}}
        if valid_items:
            record["valid"] = evaluate_loss(model, valid_items, cfg.lam, 64)
            valid_loss = record["valid"]["loss"]  # type: ignore[index]
            logging.info(f"epoch {epoch}: valid " + " ".join(f"{k}={v:.4f}" for k, v in sorted(record["valid"].items())))  # type: ignore[union-attr]
            if valid_loss < best_loss:
                best_loss = valid_loss
                best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
                if exp_dir is not None:
                    save_restoration_checkpoint(exp_dir / "best-valid-loss.pt", model, spm_model, meta,
                                    {"epoch": epoch, "train_config": asdict(cfg), "valid": record["valid"]})
        history.append(record)
        if exp_dir is not None:
            save_restoration_checkpoint(exp_dir / "last.pt", model, spm_model, meta, {"epoch": epoch, "train_config": asdict(cfg)})
    if best_state is not None:
        model.load_state_dict(best_state)
    model.eval()
    return model, {"history": history, "seconds": round(time.time() - start, 1), "best_valid_loss": best_loss}


# ---------------------------------------------------------------- command line


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    g = p.add_argument_group("data")
    g.add_argument("--train-cuts", nargs="*", default=[], help="Cut manifests whose P references are trained on")
    g.add_argument("--train-text", nargs="*", default=[], help="Text files, one punctuated utterance a line")
    g.add_argument("--valid-cuts", nargs="*", default=[], help="Validation cut manifests (P references)")
    g.add_argument("--valid-text", nargs="*", default=[], help="Validation text files")
    g.add_argument("--valid-fraction", type=float, default=0.05,
                   help="Without --valid-*: hold out this fraction of the training lines")
    g.add_argument("--test-sets", default="",
                   help="NAME=PATH,... scored after training (cut manifests or text files of P references)")
    g.add_argument("--punct-keep", default=None, help="Punctuation classes (kept marks), default '. , ?'")
    g.add_argument("--punct-map", default=None, help="Marks mapped to kept ones, e.g. '!>. ;>,'")
    g = p.add_argument_group("model")
    g.add_argument("--bpe-model", default=None,
                   help="Use this sentencepiece model (e.g. the ASR's bpe.model) instead of training one on the N text")
    g.add_argument("--vocab-size", type=int, default=1000, help="Upper bound of the trained sentencepiece vocabulary")
    g.add_argument("--d-model", type=int, default=192)
    g.add_argument("--num-layers", type=int, default=4)
    g.add_argument("--num-heads", type=int, default=4)
    g.add_argument("--ff-dim", type=int, default=768)
    g.add_argument("--kernel-size", type=int, default=7, help="Depthwise convolution kernel (odd)")
    g.add_argument("--dropout", type=float, default=0.1)
    g.add_argument("--max-words", type=int, default=DEFAULT_MAX_WORDS, help="Longer lines are cut into windows")
    g = p.add_argument_group("training")
    g.add_argument("--exp-dir", required=True)
    g.add_argument("--lambda", dest="lam", type=float, default=0.5, help="Loss lambda*L_case + (1-lambda)*L_punct")
    g.add_argument("--epochs", type=int, default=10)
    g.add_argument("--batch-size", type=int, default=32, help="Lines per batch")
    g.add_argument("--lr", type=float, default=1e-3)
    g.add_argument("--weight-decay", type=float, default=0.01)
    g.add_argument("--warmup-steps", type=int, default=100)
    g.add_argument("--seed", type=int, default=42)
    g.add_argument("--num-threads", type=int, default=1, help="torch threads")
    g.add_argument("--log-interval", type=int, default=50)
    return p


def held_out(seed: int, index: int, fraction: float) -> bool:
    """Seeded, order-independent choice of validation lines."""
    h = int.from_bytes(hashlib.sha256(f"{seed}:{index}".encode()).digest()[:8], "little")
    return h < fraction * 2**64


def parse_test_sets(spec: str) -> List[Tuple[str, str]]:
    out = []
    for item in filter(None, spec.split(",")):
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise SystemExit(f"--test-sets: expected NAME=PATH, got {item!r}")
        out.append((name, path))
    return out


def main() -> None:
    args = get_parser().parse_args()
    exp_dir = Path(args.exp_dir)
    exp_dir.mkdir(parents=True, exist_ok=True)
    setup_logging(log_file=exp_dir / "log-train.txt", file_mode="w")
    logging.info(f"Arguments: {vars(args)}")
    if not args.train_cuts and not args.train_text:
        raise SystemExit("Give training text with --train-cuts and/or --train-text")
    if not 0.0 <= args.valid_fraction < 1.0:
        raise SystemExit(f"--valid-fraction must be in [0, 1), got {args.valid_fraction}")
    torch.set_num_threads(args.num_threads)
    config = parse_punct_args(args.punct_keep, args.punct_map)
    tests = parse_test_sets(args.test_sets)

    train_lines = [p for path in args.train_cuts for _, p in read_cut_references(path)]
    train_lines += [line for path in args.train_text for line in read_text_lines(path)]
    valid_lines = [p for path in args.valid_cuts for _, p in read_cut_references(path)]
    valid_lines += [line for path in args.valid_text for line in read_text_lines(path)]
    if not valid_lines and args.valid_fraction > 0:
        valid_lines = [x for i, x in enumerate(train_lines) if held_out(args.seed, i, args.valid_fraction)]
        train_lines = [x for i, x in enumerate(train_lines) if not held_out(args.seed, i, args.valid_fraction)]
        logging.info(f"Held out {len(valid_lines)} training lines for validation (--valid-fraction {args.valid_fraction})")
    train_ex, stats = prepare_examples(train_lines, config)
    stats.log("Training text")
    valid_ex, vstats = prepare_examples(valid_lines, config)
    vstats.log("Validation text")
    if not train_ex:
        raise SystemExit("No training line has a word; nothing to train on")

    if args.bpe_model:
        spm_model = Path(args.bpe_model).read_bytes()
        logging.info(f"Using the sentencepiece model {args.bpe_model}")
    else:
        spm_model = train_sentencepiece([" ".join(ex.words) for ex in train_ex], args.vocab_size)
    meta = make_meta(config, build_mix_lexicon(train_lines, config), args.max_words)
    logging.info(f"Mixed-case lexicon: {len(meta['mix_lexicon'])} words; punctuation classes {punct_classes(config)}")
    model_cfg = RestorationConfig(
        vocab_size=PieceEncoder(spm_model).vocab_size, num_punct=len(punct_classes(config)), d_model=args.d_model,
        num_layers=args.num_layers, num_heads=args.num_heads, ff_dim=args.ff_dim,
        kernel_size=args.kernel_size, dropout=args.dropout,
    )
    train_cfg = RestorationTrainConfig(
        lam=args.lam, epochs=args.epochs, batch_size=args.batch_size, lr=args.lr, weight_decay=args.weight_decay,
        warmup_steps=args.warmup_steps, seed=args.seed, log_interval=args.log_interval,
    )
    logging.info(f"Model: {model_cfg}")
    start = time.time()
    model, info = train_model(train_ex, valid_ex, spm_model, meta, model_cfg, train_cfg, exp_dir)
    train_seconds = time.time() - start
    logging.info(f"Training took {train_seconds:.1f} s on {args.num_threads} thread(s)")

    restorer = Restorer(model, spm_model, meta)
    results = {}
    for name, path in tests:
        refs = read_references(path)
        if not refs:
            raise SystemExit(f"--test-sets {name}: {path} has no reference")
        start = time.time()
        r = evaluate_restorer(restorer, refs)
        r["restore_seconds"] = round(time.time() - start, 2)
        write_transcripts(str(exp_dir / f"restored-{name}.txt"), r.pop("hyps"))
        results[name] = r
        logging.info(f"{name}: case macro F1 {r['case_macro_f1']:.2f}, punct macro F1 {r['punct_macro_f1']:.2f}, "
                     f"PuncER {r['punc_er']:.2f}, CaseER {r['case_er']:.2f} ({r['num_lines']} lines, "
                     f"{r['skipped_lines']} skipped)")
    header = (
        f"# Restoration model ({exp_dir.name})\n\n"
        f"lambda={args.lam}, {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M parameters "
        f"(d_model {args.d_model}, {args.num_layers} layers, {model_cfg.vocab_size} pieces), "
        f"{len(train_ex)} training lines, {args.epochs} epochs, seed {args.seed}; "
        f"training {train_seconds:.0f} s on {args.num_threads} thread(s). Best validation loss "
        f"{info['best_valid_loss']:.4f}.\n\n"
    )
    (exp_dir / "results.md").write_text(header + (results_markdown(results) if results else "No --test-sets given.\n"))
    (exp_dir / "results.json").write_text(json.dumps(
        {"args": vars(args), "train_seconds": round(train_seconds, 1), "train": info, "results": results},
        indent=1, default=str) + "\n")
    logging.info(f"Wrote {exp_dir / 'results.md'}")
    example = " ".join(train_ex[0].words)
    logging.info(f"Example (a training line): {example!r} -> {restorer.restore([example])[0]!r}")


if __name__ == "__main__":
    main()
