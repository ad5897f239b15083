"""Punctuation and truecasing restoration: the cascade baseline and the P' references.

A small transformer encoder over sentencepiece pieces of N text predicts,
for every word, a case class and the punctuation mark that follows it
(Pappagari et al., *Joint prediction of truecasing and punctuation for
conversational speech in low-resource scenarios*): one shared encoder, two
linear heads, loss ``lam * L_case + (1 - lam) * L_punct``.  The label
inventory and the torch-free inference code are in
:mod:`zipformer_pc.runtime.restoration` (re-exported here).

Encoder: pieces between ``<s>`` and ``</s>``, sinusoidal positions, pre-norm
layers of self-attention, a depthwise-convolution module (Conformer style;
the local context punctuation depends on, which attention alone learned
poorly from the ~1k lines of the synthetic corpus) and a feed-forward
block.  It is bidirectional: a restorer of whole hypotheses, not a
streaming one.

    >>> r = Restorer.from_checkpoint("egs/synth/exp/restore_default/best-valid-loss.pt")
    >>> r.restore(["why does not perry see her"])
    ['Why does not Perry see her?']

Pieces: a sentencepiece unigram model trained on the N text of the training
lines (or a given one, e.g. the ASR's ``bpe.model``).  A checkpoint holds
the weights, the model and label config, the mixed-case lexicon and the
sentencepiece model, so it reloads alone; so does the ONNX export
(:func:`export_onnx`, run by :class:`OnnxRestorer`).
"""

import io
import logging
import math
import os
import random
import time
import warnings
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from zipformer_pc.metrics import score_corpus
from zipformer_pc.data.references import get_p
from zipformer_pc.runtime.restoration import (  # noqa: F401  (re-exported API)
    AUC,
    CASE_CLASSES,
    LC,
    META_CONFIG,
    META_SPM,
    MIX,
    NO_MARK,
    UC,
    BaseRestorer,
    LabeledLine,
    OnnxRestorer,
    PieceEncoder,
    apply_case,
    apply_labels,
    case_class,
    labels_from_p,
    pad_batch,
    punct_classes,
)
from zipformer_pc.text import PunctConfig, scoring_pairs

DEFAULT_MAX_WORDS = 200


# ---------------------------------------------------------------- model


@dataclass
class ModelConfig:
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


class SelfAttention(nn.Module):
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


class ConvModule(nn.Module):
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


class EncoderLayer(nn.Module):
    """Pre-norm transformer layer: self-attention, a convolution module and a GELU feed-forward block."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(cfg.d_model)
        self.attn = SelfAttention(cfg.d_model, cfg.num_heads, cfg.dropout)
        self.norm_conv = nn.LayerNorm(cfg.d_model)
        self.conv = ConvModule(cfg.d_model, cfg.kernel_size)
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

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        # std d^-0.5, so the embeddings scaled by sqrt(d) in forward() match the unit-scale positions.
        nn.init.normal_(self.embed.weight, std=cfg.d_model**-0.5)
        self.layers = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.num_layers))
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


# ---------------------------------------------------------------- data


@dataclass
class PrepStats:
    """What became of the input lines of :func:`prepare_examples`."""

    lines: int = 0
    kept: int = 0
    skipped_empty: int = 0  # blank lines
    skipped_no_words: int = 0  # lines with only marks or symbols

    def log(self, name: str) -> None:
        logging.info(
            f"{name}: {self.kept} of {self.lines} lines kept; skipped {self.skipped_empty} empty and "
            f"{self.skipped_no_words} without any word"
        )


def prepare_examples(lines: Iterable[str], config: PunctConfig) -> Tuple[List[LabeledLine], PrepStats]:
    """Targets of P (or raw punctuated) lines; lines with no word are skipped and counted."""
    stats = PrepStats()
    out: List[LabeledLine] = []
    for line in lines:
        stats.lines += 1
        if not line.strip():
            stats.skipped_empty += 1
            continue
        ex = labels_from_p(line, config)
        if ex is None:
            stats.skipped_no_words += 1
            continue
        out.append(ex)
        stats.kept += 1
    return out, stats


def build_mix_lexicon(lines: Iterable[str], config: PunctConfig) -> Dict[str, str]:
    """Lowercase word -> its most frequent mixed-case spelling (``MIX`` class) in the lines."""
    counts: Dict[str, Counter] = {}
    for line in lines:
        for word, _ in scoring_pairs(line, config):
            if case_class(word) == MIX:
                counts.setdefault(word.lower(), Counter())[word] += 1
    # Most frequent spelling; ties broken alphabetically so the lexicon is deterministic.
    return {w: min(c.items(), key=lambda kv: (-kv[1], kv[0]))[0] for w, c in sorted(counts.items())}


def read_text_lines(path: str) -> List[str]:
    """A plain text file, one utterance a line (blank lines are kept, to be counted by the caller)."""
    with open(path, encoding="utf-8") as f:
        return f.read().splitlines()


def read_cut_references(path: str, use_auto: bool = False) -> List[Tuple[str, str]]:
    """``(supervision id, P)`` of every supervision of a cut manifest that has a P reference."""
    from lhotse import load_manifest_lazy

    out: List[Tuple[str, str]] = []
    missing = 0
    for cut in load_manifest_lazy(path):
        for sup in cut.supervisions:
            p = get_p(sup, use_auto)
            if p is None:
                missing += 1
            else:
                out.append((sup.id, p))
    logging.info(f"{path}: {len(out)} supervisions with a P reference, {missing} without (not used)")
    return out


def read_references(path: str) -> List[Tuple[str, str]]:
    """``(id, P)`` pairs from a cut manifest (``.jsonl.gz``/``.jsonl``) or a text file (ids are line numbers)."""
    if path.endswith((".jsonl.gz", ".jsonl")):
        return read_cut_references(path)
    return [(f"line-{i}", line) for i, line in enumerate(read_text_lines(path), 1)]


def train_sentencepiece(n_lines: Sequence[str], vocab_size: int) -> bytes:
    """A unigram sentencepiece model of N text, returned serialized.

    ``vocab_size`` is an upper bound: a small corpus gets fewer pieces.
    """
    import sentencepiece as spm

    if not n_lines:
        raise ValueError("No text to train the sentencepiece model on")
    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(n_lines),
        model_writer=buf,
        model_type="unigram",
        vocab_size=vocab_size,
        hard_vocab_limit=False,
        character_coverage=1.0,
        shuffle_input_sentence=False,
        num_threads=1,  # deterministic
        minloglevel=2,
    )
    return buf.getvalue()


@dataclass
class Encoded:
    """One training line in pieces."""

    ids: List[int]
    first: List[int]
    last: List[int]
    case: List[int]
    punct: List[int]


def encode_examples(examples: Sequence[LabeledLine], encoder: PieceEncoder, max_words: int) -> List[Encoded]:
    """Pieces of the examples; lines longer than ``max_words`` are cut into windows (as at inference)."""
    out: List[Encoded] = []
    for ex in examples:
        for s in range(0, len(ex.words), max_words):
            ids, first, last = encoder.encode(ex.words[s : s + max_words])
            out.append(Encoded(ids, first, last, ex.case[s : s + max_words], ex.punct[s : s + max_words]))
    return out


@dataclass
class Batch:
    tokens: torch.Tensor  # (B, T)
    lengths: torch.Tensor  # (B,)
    rows: torch.Tensor  # (W,) batch row of each word
    first: torch.Tensor  # (W,) piece index of each word's first piece
    last: torch.Tensor  # (W,) ... and last piece
    case: torch.Tensor  # (W,)
    punct: torch.Tensor  # (W,)


def make_batch(items: Sequence[Encoded]) -> Batch:
    tokens, lengths = pad_batch([e.ids for e in items])
    rows = [i for i, e in enumerate(items) for _ in e.first]

    def cat(attr: str) -> torch.Tensor:
        return torch.tensor([v for e in items for v in getattr(e, attr)], dtype=torch.long)

    return Batch(
        torch.from_numpy(tokens), torch.from_numpy(lengths), torch.tensor(rows, dtype=torch.long),
        cat("first"), cat("last"), cat("case"), cat("punct"),
    )


def batches(items: Sequence[Encoded], batch_size: int, rng: Optional[random.Random]) -> List[Batch]:
    """Batches of lines of similar length; shuffled (lines and batch order) when ``rng`` is given."""
    order = list(range(len(items)))
    if rng is not None:
        rng.shuffle(order)
    # Sort within pools of 50 batches: similar lengths in a batch, yet a different mix each epoch.
    pool = 50 * batch_size
    out = []
    for p in range(0, len(order), pool):
        chunk = sorted(order[p : p + pool], key=lambda k: len(items[k].ids))
        out.extend(make_batch([items[k] for k in chunk[b : b + batch_size]]) for b in range(0, len(chunk), batch_size))
    if rng is not None:
        rng.shuffle(out)
    return out


# ---------------------------------------------------------------- training


def compute_loss(model: RestorationModel, batch: Batch, lam: float) -> Tuple[torch.Tensor, Dict[str, float]]:
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
class TrainConfig:
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


def save_checkpoint(path: Path, model: RestorationModel, spm_model: bytes, meta: Mapping[str, object],
                    info: Mapping[str, object]) -> None:
    """Atomically write weights, configs and the sentencepiece model (a checkpoint alone reloads)."""
    tmp = path.with_name(path.name + ".tmp")
    torch.save(
        {"model": model.state_dict(), "model_config": asdict(model.cfg), "meta": dict(meta),
         "spm_model": spm_model, "info": dict(info)},
        tmp,
    )
    os.replace(tmp, path)


def load_checkpoint(path: str) -> Tuple[RestorationModel, bytes, Dict[str, object], Dict[str, object]]:
    """``(model in eval mode, sentencepiece model, meta, info)`` of a checkpoint."""
    ckpt = torch.load(path, map_location="cpu", weights_only=True)
    for key in ("model", "model_config", "meta", "spm_model"):
        if key not in ckpt:
            raise ValueError(f"{path}: not a restoration checkpoint (no {key!r})")
    model = RestorationModel(ModelConfig(**ckpt["model_config"]))
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
        model, spm_model, meta, _ = load_checkpoint(path)
        return cls(model, spm_model, meta)

    def logits(self, tokens: np.ndarray, lengths: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
        was_training = self.model.training
        self.model.eval()
        with torch.no_grad():
            case, punct = self.model(torch.from_numpy(tokens), torch.from_numpy(lengths))
        self.model.train(was_training)
        return case.numpy(), punct.numpy()


def cascade_restore(hyps: Mapping[str, str], restorer: BaseRestorer, batch_size: int = 64) -> Dict[str, str]:
    """Cascade decoding: P hypotheses from N hypotheses (``utt_id -> text``), in the same order.

    An empty N hypothesis gives an empty P hypothesis.
    """
    ids = list(hyps)
    restored = restorer.restore([hyps[i] for i in ids], batch_size)
    empty = sum(1 for r in restored if not r)
    if empty:
        logging.info(f"cascade_restore: {empty} of {len(ids)} hypotheses are empty and stay empty")
    return dict(zip(ids, restored))


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
        for batch in batches(items, batch_size, None):
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
    model_cfg: ModelConfig,
    cfg: TrainConfig,
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
        f"{steps_per_epoch} batches/epoch, lambda={cfg.lam}"
    )
    history: List[Dict[str, object]] = []
    best_loss = math.inf
    best_state = None
    step = 0
    start = time.time()
    for epoch in range(1, cfg.epochs + 1):
        running: Counter = Counter()
        n = 0
        for batch in batches(train_items, cfg.batch_size, rng):
            loss, info = compute_loss(model, batch, cfg.lam)
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
                    save_checkpoint(exp_dir / "best-valid-loss.pt", model, spm_model, meta,
                                    {"epoch": epoch, "train_config": asdict(cfg), "valid": record["valid"]})
        history.append(record)
        if exp_dir is not None:
            save_checkpoint(exp_dir / "last.pt", model, spm_model, meta, {"epoch": epoch, "train_config": asdict(cfg)})
    if best_state is not None:
        model.load_state_dict(best_state)
    model.eval()
    return model, {"history": history, "seconds": round(time.time() - start, 1), "best_valid_loss": best_loss}


# ---------------------------------------------------------------- evaluation


def class_prf(gold: Sequence[int], pred: Sequence[int], names: Sequence[str]) -> Dict[str, Dict[str, float]]:
    """Per-class precision / recall / F1 (percent) and support; ``None`` where undefined."""
    g = np.asarray(gold)
    p = np.asarray(pred)
    out: Dict[str, Dict[str, float]] = {}
    for i, name in enumerate(names):
        tp = int(np.sum((g == i) & (p == i)))
        n_pred = int(np.sum(p == i))
        n_gold = int(np.sum(g == i))
        prec = 100.0 * tp / n_pred if n_pred else None
        rec = 100.0 * tp / n_gold if n_gold else None
        f1 = None
        if prec is not None and rec is not None:
            f1 = 2 * prec * rec / (prec + rec) if prec + rec else 0.0
        elif n_gold:
            f1 = 0.0  # the class occurs but is never predicted
        out[name] = {"precision": prec, "recall": rec, "f1": f1, "support": n_gold, "predicted": n_pred}
    return out


def macro_f1(table: Mapping[str, Mapping[str, Optional[float]]], exclude: Sequence[str] = ()) -> Optional[float]:
    """Mean F1 over the classes that occur in the reference (support > 0), minus ``exclude``."""
    f1s = [v["f1"] for k, v in table.items() if v["support"] and k not in exclude]
    return sum(f1s) / len(f1s) if f1s else None  # type: ignore[arg-type]


def evaluate(restorer: BaseRestorer, refs: Sequence[Tuple[str, str]], batch_size: int = 64) -> Dict[str, object]:
    """Restore the N text of reference P lines and score the result.

    Returns per-class P/R/F1 and macro F1 for case and punctuation (word
    level; punctuation macro F1 also without the ``O`` class), and the
    corpus metrics of :func:`zipformer_pc.metrics.score_corpus` of the
    restored P against the reference P (PuncER, CaseER, PER ...; WER is 0
    by construction).
    """
    config = restorer.config
    examples: List[LabeledLine] = []
    kept_refs: List[Tuple[str, str]] = []
    for utt_id, ref in refs:
        ex = labels_from_p(ref, config)
        if ex is not None:
            examples.append(ex)
            kept_refs.append((utt_id, ref))
    preds = restorer.predict([ex.words for ex in examples], batch_size)
    hyps = [apply_labels(ex.words, c, p, restorer.classes, restorer.mix_lexicon) for ex, (c, p) in zip(examples, preds)]
    case = class_prf([c for ex in examples for c in ex.case], [c for cs, _ in preds for c in cs], CASE_CLASSES)
    punct = class_prf([p for ex in examples for p in ex.punct], [p for _, ps in preds for p in ps], restorer.classes)
    summary = score_corpus(((u, r, h) for (u, r), h in zip(kept_refs, hyps)), config).summary()
    return {
        "num_lines": len(examples),
        "skipped_lines": len(refs) - len(examples),
        "num_words": sum(len(ex.words) for ex in examples),
        "case": case,
        "punct": punct,
        "case_macro_f1": macro_f1(case),
        "punct_macro_f1": macro_f1(punct),
        "punct_marks_macro_f1": macro_f1(punct, exclude=(NO_MARK,)),
        "punc_er": summary["punc_er"],
        "case_er": summary["case_er"],
        "per": summary["per"],
        "pc_wer": summary["pc_wer"],
        "hyps": list(zip([u for u, _ in kept_refs], hyps)),
    }


def _f(x: Optional[float]) -> str:
    return "-" if x is None else f"{x:.2f}"


_MARK_NAMES = {NO_MARK: "O (none)", ".": "Period", ",": "Comma", "?": "Question mark", "!": "Exclamation",
               ";": "Semicolon", ":": "Colon", "...": "Ellipsis", "--": "Dash"}


def results_markdown(results: Mapping[str, Mapping[str, object]]) -> str:
    """Markdown tables of :func:`evaluate` results (``set name -> result``).

    A summary table (macro F1, PuncER, CaseER per set), then per set the
    per-class tables of truecasing and punctuation (precision / recall / F1
    per class and the macro F1, as in Pappagari et al.'s tables).
    """
    lines = [
        "| set | lines | words | case macro F1 | punct macro F1 | punct macro F1 (marks) | PuncER | CaseER | PER |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, r in results.items():
        lines.append(
            f"| {name} | {r['num_lines']} | {r['num_words']} | {_f(r['case_macro_f1'])} | {_f(r['punct_macro_f1'])} "  # type: ignore[arg-type]
            f"| {_f(r['punct_marks_macro_f1'])} | {_f(r['punc_er'])} | {_f(r['case_er'])} | {_f(r['per'])} |"  # type: ignore[arg-type]
        )
    for name, r in results.items():
        for task, title, labels in (("case", "Truecasing", {}), ("punct", "Punctuation", _MARK_NAMES)):
            table: Mapping[str, Mapping[str, object]] = r[task]  # type: ignore[assignment]
            lines += ["", f"{title}, {name}:", "", "| class | support | precision | recall | F1 |", "|---|---|---|---|---|"]
            for cls, v in table.items():
                lines.append(f"| {labels.get(cls, cls)} | {v['support']} | {_f(v['precision'])} | "  # type: ignore[arg-type]
                             f"{_f(v['recall'])} | {_f(v['f1'])} |")  # type: ignore[arg-type]
            lines.append(f"| macro | | | | {_f(r[task + '_macro_f1'])} |")  # type: ignore[arg-type]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- ONNX export


def export_onnx(checkpoint: str, out_path: str, opset: int = 17, atol: float = 1e-4, seed: int = 0) -> float:
    """Export a checkpoint to ONNX (dynamic batch and length) and check it against torch.

    The file carries the restoration config and the sentencepiece model as
    metadata, so :class:`OnnxRestorer` needs nothing else.  The check runs
    both on a random batch with a different shape than the export's and
    raises ``RuntimeError`` when any unpadded logit differs by more than
    ``atol``.  Returns the largest difference.
    """
    import base64
    import json

    import onnx

    model, spm_model, meta, _ = load_checkpoint(checkpoint)
    gen = torch.Generator().manual_seed(seed)
    vocab = model.cfg.vocab_size
    tokens = torch.randint(0, vocab, (2, 11), generator=gen)
    lengths = torch.tensor([11, 6])
    out = Path(out_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    with warnings.catch_warnings():
        # The TorchScript-based exporter is chosen on purpose (dynamo=False); silence its deprecation notice.
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.onnx.export(
            model, (tokens, lengths), str(tmp), dynamo=False, opset_version=opset,
            input_names=["tokens", "lengths"], output_names=["case_logits", "punct_logits"],
            dynamic_axes={"tokens": {0: "N", 1: "T"}, "lengths": {0: "N"},
                          "case_logits": {0: "N", 1: "T"}, "punct_logits": {0: "N", 1: "T"}},
        )
    proto = onnx.load(str(tmp))
    for key, value in ((META_CONFIG, json.dumps(meta)), (META_SPM, base64.b64encode(spm_model).decode("ascii")),
                       ("model_type", "zipformer_pc_restoration")):
        prop = proto.metadata_props.add()
        prop.key, prop.value = key, value
    onnx.save(proto, str(tmp))
    os.replace(tmp, out)

    check_tokens = torch.randint(0, vocab, (3, 29), generator=gen)
    check_lengths = torch.tensor([29, 17, 1])
    with torch.no_grad():
        ref = [t.numpy() for t in model(check_tokens, check_lengths)]
    got = OnnxRestorer(str(out)).logits(check_tokens.numpy(), check_lengths.numpy())
    diff = 0.0
    for r, g in zip(ref, got):
        for row, n in enumerate(check_lengths.tolist()):
            diff = max(diff, float(np.abs(r[row, :n] - g[row, :n]).max()))
    if not diff <= atol:
        raise RuntimeError(f"ONNX and torch logits differ by {diff:.3g} > {atol} ({out}); do not use this export")
    logging.info(f"Exported {out} (opset {opset}); max |ONNX - torch| logit difference {diff:.2e} <= {atol}")
    return diff


def load_restorer(checkpoint: Optional[str] = None, onnx: Optional[str] = None, num_threads: int = 1) -> BaseRestorer:
    """A :class:`Restorer` from a checkpoint or an :class:`OnnxRestorer` from an export (exactly one)."""
    if (checkpoint is None) == (onnx is None):
        raise ValueError("Give exactly one of a checkpoint and an ONNX file")
    if onnx is not None:
        return OnnxRestorer(onnx, num_threads=num_threads)
    torch.set_num_threads(num_threads)
    return Restorer.from_checkpoint(checkpoint)  # type: ignore[arg-type]
