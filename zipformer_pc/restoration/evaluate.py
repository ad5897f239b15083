"""Scoring a restorer: per-class precision / recall / F1 of case and punctuation,
macro F1, and the corpus metrics (PuncER, CaseER, PER) of the restored text."""

from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from zipformer_pc.metrics import MARK_NAMES, fmt, score_corpus
from zipformer_pc.runtime.restoration import CASE_CLASSES, NO_MARK, BaseRestorer, LabeledLine, apply_labels, labels_from_p


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


def evaluate_restorer(restorer: BaseRestorer, refs: Sequence[Tuple[str, str]], batch_size: int = 64) -> Dict[str, object]:
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


_MARK_NAMES = {NO_MARK: "O (none)", **MARK_NAMES}


def results_markdown(results: Mapping[str, Mapping[str, object]]) -> str:
    """Markdown tables of :func:`evaluate_restorer` results (``set name -> result``).

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
            f"| {name} | {r['num_lines']} | {r['num_words']} | {fmt(r['case_macro_f1'])} | {fmt(r['punct_macro_f1'])} "  # type: ignore[arg-type]
            f"| {fmt(r['punct_marks_macro_f1'])} | {fmt(r['punc_er'])} | {fmt(r['case_er'])} | {fmt(r['per'])} |"  # type: ignore[arg-type]
        )
    for name, r in results.items():
        for task, title, labels in (("case", "Truecasing", {}), ("punct", "Punctuation", _MARK_NAMES)):
            table: Mapping[str, Mapping[str, object]] = r[task]  # type: ignore[assignment]
            lines += ["", f"{title}, {name}:", "", "| class | support | precision | recall | F1 |", "|---|---|---|---|---|"]
            for cls, v in table.items():
                lines.append(f"| {labels.get(cls, cls)} | {v['support']} | {fmt(v['precision'])} | "  # type: ignore[arg-type]
                             f"{fmt(v['recall'])} | {fmt(v['f1'])} |")  # type: ignore[arg-type]
            lines.append(f"| macro | | | | {fmt(r[task + '_macro_f1'])} |")  # type: ignore[arg-type]
    return "\n".join(lines) + "\n"
