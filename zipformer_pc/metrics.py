"""The one implementation of the metrics both papers report.

Every number is computed over a whole test set: errors and reference counts
are summed over utterances, then divided.  Denominators are counted from the
references, never typed in.  References and hypotheses go through the same
normalization (:mod:`zipformer_pc.text`) before scoring, with hyphenated words
split in every view and punctuation marks scored as separate tokens.

Views of one transcript (Cui et al. 2023, eq. 8):

==========  =====================  ===================================
view        tokens                 example for ``Hello world, how?``
==========  =====================  ===================================
``np_nc``   lowercase words        ``hello world how``
``np_c``    cased words            ``Hello world how``
``p_nc``    lowercase words+marks  ``hello world , how ?``
``p_c``     cased words+marks      ``Hello world , how ?``
==========  =====================  ===================================

* WER = E_np-nc / N_words; WER-C = E_np-c / N_words; WER-P = E_p-nc / N_p-nc;
  PC-WER (= LibriSpeech-PC's WER-PC) = E_p-c / N_p-c.
* PuncER = (E_p-nc - E_np-nc) / N_p with N_p the number of reference marks.
* CaseER = (E_np-c - E_np-nc) / N_c with N_c the number of reference words
  that carry an uppercase letter.
* PER (Meister et al. 2023): marks are masked to one symbol, the masked
  sequences aligned (words compared case-insensitively); aligned mark pairs are
  Correct when equal, Substitutions otherwise; D = N_ref - (S + C),
  I = N_hyp - (S + C), PER = (I + D + S) / (I + D + S + C).  Per-mark counts
  use the reference mark for C, S and D and the hypothesis mark for I.
* Punctuation and capitalization precision / recall / F1 on the utterances
  whose WER is 0 (LibriSpeech-PC Table 2 protocol).
* Matched-pair significance test between two systems (MAPSSWE, as SCTK's
  ``sc_stats``; one segment per utterance) for WER, PuncER, CaseER and PC-WER.
* Paired bootstrap over utterances (Bisani & Ney 2004) for the corpus ratios
  WER, PC-WER and PER themselves: how often B is worse / better than A when the
  same utterances are drawn with replacement for both.

All alignments are done by kaldialign (compiled edit distance).
"""

import math
import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

import kaldialign

from zipformer_pc.text import DEFAULT_PUNCT, MARKS, PunctConfig, scoring_pairs

VIEWS = ("np_nc", "np_c", "p_nc", "p_c")
_MASK = "<PUNCT>"
_EPS = "<eps>"
_NONE = "_"  # "no mark" in the substitution matrix (never a mark itself)


@dataclass
class Views:
    """The four token views of one normalized transcript."""

    np_nc: List[str]
    np_c: List[str]
    p_nc: List[str]
    p_c: List[str]
    marks: List[str]  # the marks, in order
    n_cased: int  # words carrying an uppercase letter

    @classmethod
    def of(cls, text: str, config: PunctConfig = DEFAULT_PUNCT) -> "Views":
        np_nc: List[str] = []
        np_c: List[str] = []
        p_nc: List[str] = []
        p_c: List[str] = []
        marks: List[str] = []
        n_cased = 0
        for word, mark in scoring_pairs(text, config):
            low = word.lower()
            np_nc.append(low)
            np_c.append(word)
            p_nc.append(low)
            p_c.append(word)
            if low != word:
                n_cased += 1
            if mark:
                p_nc.append(mark)
                p_c.append(mark)
                marks.append(mark)
        return cls(np_nc, np_c, p_nc, p_c, marks, n_cased)


@dataclass
class UttScore:
    """Error counts of one utterance."""

    utt_id: str
    errors: Dict[str, int]  # view -> S + D + I
    ref_len: Dict[str, int]  # view -> reference length
    n_p: int  # reference marks
    n_c: int  # reference cased words
    # PER: per-mark counts.  correct[m]: ref m aligned to hyp m;
    # subs[(r, h)]: ref mark r aligned to a different hyp mark h.
    punct_ref: Counter = field(default_factory=Counter)
    punct_hyp: Counter = field(default_factory=Counter)
    punct_correct: Counter = field(default_factory=Counter)
    punct_subs: Counter = field(default_factory=Counter)
    # Table 2 protocol, filled only when the word sequence is exactly right.
    zero_wer: bool = False
    cap_tp: int = 0
    cap_fp: int = 0
    cap_fn: int = 0
    punc_tp: Counter = field(default_factory=Counter)
    punc_fp: Counter = field(default_factory=Counter)
    punc_fn: Counter = field(default_factory=Counter)

    @property
    def punct_errors(self) -> int:
        """Cui's punctuation-only errors of this utterance."""
        return self.errors["p_nc"] - self.errors["np_nc"]

    @property
    def case_errors(self) -> int:
        """Cui's case-only errors of this utterance."""
        return self.errors["np_c"] - self.errors["np_nc"]


def _edit_errors(ref: Sequence[str], hyp: Sequence[str]) -> int:
    if not ref:
        return len(hyp)
    if not hyp:
        return len(ref)
    if ref == hyp:
        return 0
    return kaldialign.edit_distance(ref, hyp)["total"]


def word_errors(ref: Sequence[str], hyp: Sequence[str]) -> Tuple[List[bool], int]:
    """Which reference words a minimum-edit alignment with ``hyp`` gets wrong
    (substituted or deleted), one flag per word of ``ref``, and how many words
    it inserts: their sum is the edit distance that WER counts."""
    wrong: List[bool] = []
    inserted = 0
    for r, h in kaldialign.align(ref, hyp, _EPS):
        if r == _EPS:
            inserted += 1
        else:
            wrong.append(r != h)
    return wrong, inserted


def score_utterance(
    utt_id: str, ref: str, hyp: str, config: PunctConfig = DEFAULT_PUNCT
) -> UttScore:
    """Score one reference/hypothesis pair (raw text; normalized here)."""
    rv = Views.of(ref, config)
    hv = Views.of(hyp, config)
    errors = {v: _edit_errors(getattr(rv, v), getattr(hv, v)) for v in VIEWS}
    ref_len = {v: len(getattr(rv, v)) for v in VIEWS}
    s = UttScore(utt_id, errors, ref_len, n_p=len(rv.marks), n_c=rv.n_cased)
    _score_punct_positions(rv, hv, s)
    if errors["np_nc"] == 0:
        _score_zero_wer(rv, hv, s)
    return s


def _score_punct_positions(rv: Views, hv: Views, s: UttScore) -> None:
    """LibriSpeech-PC PER counts: align with every mark masked to one symbol."""
    s.punct_ref.update(rv.marks)
    s.punct_hyp.update(hv.marks)
    if not rv.marks or not hv.marks:
        return  # no mark can be Correct or Substituted
    ref = [_MASK if t in _MARK_SET else t for t in rv.p_nc]
    hyp = [_MASK if t in _MARK_SET else t for t in hv.p_nc]
    ri = iter(rv.marks)
    hi = iter(hv.marks)
    for r, h in kaldialign.align(ref, hyp, _EPS):
        rm = next(ri) if r == _MASK else None
        hm = next(hi) if h == _MASK else None
        if rm is not None and hm is not None:
            if rm == hm:
                s.punct_correct[rm] += 1
            else:
                s.punct_subs[(rm, hm)] += 1


def _score_zero_wer(rv: Views, hv: Views, s: UttScore) -> None:
    """Capitalization and punctuation decisions word by word (same words)."""
    s.zero_wer = True
    r_pairs = _word_marks(rv)
    h_pairs = _word_marks(hv)
    for (rw, rm), (hw, hm) in zip(r_pairs, h_pairs):
        r_cap = rw != rw.lower()
        h_cap = hw != hw.lower()
        if r_cap and h_cap and rw == hw:
            s.cap_tp += 1
        else:
            s.cap_fp += int(h_cap)
            s.cap_fn += int(r_cap)
        if rm and rm == hm:
            s.punc_tp[rm] += 1
        else:
            if hm:
                s.punc_fp[hm] += 1
            if rm:
                s.punc_fn[rm] += 1


def _word_marks(v: Views) -> List[Tuple[str, str]]:
    out: List[Tuple[str, str]] = []
    for tok in v.p_c:
        if tok in _MARK_SET:
            out[-1] = (out[-1][0], tok)
        else:
            out.append((tok, ""))
    return out


_MARK_SET = frozenset(MARKS)
# The names the tables give the marks (LibriSpeech-PC's Table 4 spelling).
MARK_NAMES = {".": "Period", ",": "Comma", "?": "Question Mark", "!": "Exclamation",
              ";": "Semicolon", ":": "Colon", "...": "Ellipsis", "--": "Dash"}


def _pct(num: float, den: float) -> Optional[float]:
    return 100.0 * num / den if den else None


def _prf(tp: int, fp: int, fn: int) -> Dict[str, Optional[float]]:
    p = _pct(tp, tp + fp)
    r = _pct(tp, tp + fn)
    f = None
    if p is not None and r is not None:
        f = 2 * p * r / (p + r) if p + r > 0 else 0.0
    return {"precision": p, "recall": r, "f1": f, "tp": tp, "fp": fp, "fn": fn}


@dataclass
class CorpusScore:
    """Summed counts over a test set and the metrics derived from them."""

    utts: List[UttScore]
    config: PunctConfig = DEFAULT_PUNCT

    def totals(self) -> Dict[str, int]:
        t: Dict[str, int] = Counter()
        for u in self.utts:
            for v in VIEWS:
                t[f"E_{v}"] += u.errors[v]
                t[f"N_{v}"] += u.ref_len[v]
            t["N_p"] += u.n_p
            t["N_c"] += u.n_c
        return dict(t)

    def per_counts(self) -> Dict[str, object]:
        ref: Counter = Counter()
        hyp: Counter = Counter()
        cor: Counter = Counter()
        subs: Counter = Counter()
        for u in self.utts:
            ref.update(u.punct_ref)
            hyp.update(u.punct_hyp)
            cor.update(u.punct_correct)
            subs.update(u.punct_subs)
        # Kept marks in the config's order (". , ?" gives the paper's columns).
        marks = list(self.config.keep)
        marks += [m for m in MARKS if m not in marks and (ref[m] or hyp[m])]
        per_marks: Dict[str, Dict[str, object]] = {}
        for m in marks:
            c = cor[m]
            s_row = sum(n for (r, _), n in subs.items() if r == m)
            s_col = sum(n for (_, h), n in subs.items() if h == m)
            d = ref[m] - c - s_row
            i = hyp[m] - c - s_col
            den = c + d + i + s_row
            to = {h: n for (r, h), n in sorted(subs.items()) if r == m}
            per_marks[m] = {
                "C": c,
                "D": d,
                "I": i,
                "S": s_row,
                "N_ref": ref[m],
                "N_hyp": hyp[m],
                "S_to": to,
                "correct": _pct(c, den),
                "deletions": _pct(d, den),
                "insertions": _pct(i, den),
                "substitutions": _pct(s_row, den),
                "substitutions_to": {h: _pct(n, den) for h, n in to.items()},
                "per": _pct(d + i + s_row, den),
            }
        C = sum(cor.values())
        S = sum(subs.values())
        D = sum(ref.values()) - C - S
        I = sum(hyp.values()) - C - S
        # Rows: reference mark (or "_" for none, i.e. insertions); columns:
        # hypothesis mark (or "_" for none, i.e. deletions).
        matrix: Dict[str, Dict[str, int]] = {}
        for r in marks:
            matrix[r] = {h: (cor[r] if r == h else subs[(r, h)]) for h in marks}
            matrix[r][_NONE] = per_marks[r]["D"]  # type: ignore[assignment]
        matrix[_NONE] = {h: per_marks[h]["I"] for h in marks}  # type: ignore[misc]
        matrix[_NONE][_NONE] = 0
        return {
            "C": C,
            "S": S,
            "D": D,
            "I": I,
            "N_ref": sum(ref.values()),
            "N_hyp": sum(hyp.values()),
            "per": _pct(I + D + S, I + D + S + C),
            "per_marks": per_marks,
            "matrix": matrix,
        }

    def zero_wer_prf(self) -> Dict[str, object]:
        q = [u for u in self.utts if u.zero_wer]
        cap = _prf(sum(u.cap_tp for u in q), sum(u.cap_fp for u in q), sum(u.cap_fn for u in q))
        tp: Counter = Counter()
        fp: Counter = Counter()
        fn: Counter = Counter()
        for u in q:
            tp.update(u.punc_tp)
            fp.update(u.punc_fp)
            fn.update(u.punc_fn)
        punc = _prf(sum(tp.values()), sum(fp.values()), sum(fn.values()))
        per_mark = {
            m: _prf(tp[m], fp[m], fn[m]) for m in MARKS if tp[m] or fp[m] or fn[m]
        }
        return {
            "num_utts": len(self.utts),
            "num_zero_wer_utts": len(q),
            "capitalization": cap,
            "punctuation": punc,
            "punctuation_per_mark": per_mark,
        }

    def summary(self) -> Dict[str, object]:
        """Every metric (percent) with the counts behind it; the JSON of ``scoring/score.py``."""
        t = self.totals()
        per = self.per_counts()
        wer = _pct(t["E_np_nc"], t["N_np_nc"])
        out: Dict[str, object] = {
            "num_utts": len(self.utts),
            "wer": wer,
            "wer_c": _pct(t["E_np_c"], t["N_np_nc"]),
            "wer_p": _pct(t["E_p_nc"], t["N_p_nc"]),
            "pc_wer": _pct(t["E_p_c"], t["N_p_c"]),
            "wer_pc": _pct(t["E_p_c"], t["N_p_c"]),
            "punc_er": _pct(t["E_p_nc"] - t["E_np_nc"], t["N_p"]),
            "case_er": _pct(t["E_np_c"] - t["E_np_nc"], t["N_c"]),
            "per": per["per"],
            "per_marks": per["per_marks"],
            "per_counts": {k: per[k] for k in ("C", "S", "D", "I", "N_ref", "N_hyp")},
            "punct_matrix": per["matrix"],
            "counts": t,
            "zero_wer_prf": self.zero_wer_prf(),
            "punct_config": {"keep": list(self.config.keep), "map": dict(self.config.mapping)},
        }
        return out


def score_corpus(
    pairs: Iterable[Tuple[str, str, str]], config: PunctConfig = DEFAULT_PUNCT
) -> CorpusScore:
    """Score ``(utt_id, ref, hyp)`` triples."""
    return CorpusScore([score_utterance(u, r, h, config) for u, r, h in pairs], config)


# ---------------------------------------------------------------- tables

TABLE_COLUMNS: Tuple[Tuple[str, str], ...] = (
    ("WER", "wer"),
    ("PuncER", "punc_er"),
    ("CaseER", "case_er"),
    ("PC-WER", "pc_wer"),
    ("PER", "per"),
    ("WER-C", "wer_c"),
    ("WER-PC", "wer_pc"),
)


def score_groups(triples: Sequence[Tuple[str, str, str]], group_of: Mapping[str, str],
                 config: PunctConfig = DEFAULT_PUNCT) -> Dict[str, Dict[str, object]]:
    """``{group: summary}`` (groups sorted) of ``(utt_id, ref, hyp)`` triples, each
    utterance in the group ``group_of[utt_id]`` (a speaker; a source and kind of
    test_real).  An utterance without a group is an error that names it."""
    missing = [t[0] for t in triples if t[0] not in group_of]
    if missing:
        raise ValueError(f"no group for {len(missing)} of the {len(triples)} scored utterances, e.g. {missing[:3]}")
    groups: Dict[str, List[Tuple[str, str, str]]] = {}
    for t in triples:
        groups.setdefault(group_of[t[0]], []).append(t)
    return {g: score_corpus(groups[g], config).summary() for g in sorted(groups)}


def fmt(x: Optional[float]) -> str:
    """A rate (percent) as the tables print it: two decimals, ``-`` when undefined."""
    return "-" if x is None else f"{x:.2f}"


def markdown_header(first: str = "system") -> str:
    names = [n for n, _ in TABLE_COLUMNS]
    return "| " + " | ".join([first] + names) + " |\n|" + "---|" * (len(names) + 1)


def markdown_row(name: str, summary: Mapping[str, object], marks: Mapping[str, str] = {}) -> str:
    """One table row; ``marks`` may add a suffix (e.g. a significance mark) per key."""
    cells = [fmt(summary[k]) + marks.get(k, "") for _, k in TABLE_COLUMNS]  # type: ignore[arg-type]
    return "| " + " | ".join([name] + cells) + " |"


def per_mark_table(summary: Mapping[str, object]) -> str:
    """The LibriSpeech-PC Table 4 layout: one column per mark, rates in percent."""
    pm: Dict[str, Dict[str, object]] = summary["per_marks"]  # type: ignore[assignment]
    marks = list(pm)
    lines = ["| Metrics | " + " | ".join(MARK_NAMES.get(m, m) for m in marks) + " |",
             "|---|" + "---|" * len(marks)]

    def row(label: str, values: List[Optional[float]]) -> None:
        lines.append(f"| {label} | " + " | ".join(fmt(v) for v in values) + " |")

    row("Correct", [pm[m]["correct"] for m in marks])  # type: ignore[misc]
    row("Deletions", [pm[m]["deletions"] for m in marks])  # type: ignore[misc]
    row("Insertions", [pm[m]["insertions"] for m in marks])  # type: ignore[misc]
    row("Substitutions (total)", [pm[m]["substitutions"] for m in marks])  # type: ignore[misc]
    for to in marks:
        vals = []
        for m in marks:
            if m == to:
                vals.append(None)
            else:
                rates = pm[m]["substitutions_to"]
                vals.append(rates.get(to, 0.0) if pm[m]["per"] is not None else None)  # type: ignore[union-attr]
        row(f"Substitutions (to {MARK_NAMES.get(to, to)})", vals)
    row("PER", [pm[m]["per"] for m in marks])  # type: ignore[misc]
    return "\n".join(lines)


# ---------------------------------------------------------------- significance


def mapsswe(a: Sequence[float], b: Sequence[float]) -> Dict[str, Optional[float]]:
    """Matched-pair test on per-segment error counts of systems A and B.

    Z_i = a_i - b_i; W = mean(Z) / (std(Z) / sqrt(n)) is compared with a
    standard normal (two-sided), as SCTK's MAPSSWE does.  Returns the mean
    difference, W (None when all differences are equal) and the p-value.
    """
    if len(a) != len(b):
        raise ValueError(f"Matched-pair test needs the same segments: {len(a)} vs {len(b)}")
    n = len(a)
    if n < 2:
        return {"n": n, "mean_diff": float(sum(a) - sum(b)), "w": None, "p_value": 1.0}
    z = [x - y for x, y in zip(a, b)]
    mu = sum(z) / n
    var = sum((x - mu) ** 2 for x in z) / (n - 1)
    if var == 0.0:
        # Every segment differs by the same amount: W is undefined.  If that
        # amount is 0 the systems are identical (p = 1); otherwise fall back to
        # the two-sided sign test (all n segments favour one system).
        p = 1.0 if mu == 0 else min(1.0, 2.0 * 0.5**n)
        return {"n": n, "mean_diff": mu, "w": None, "p_value": p}
    w = mu / math.sqrt(var / n)
    p = math.erfc(abs(w) / math.sqrt(2.0))
    return {"n": n, "mean_diff": mu, "w": w, "p_value": p}


SIGNIFICANCE_METRICS = {
    "wer": lambda u: u.errors["np_nc"],
    "punc_er": lambda u: u.punct_errors,
    "case_er": lambda u: u.case_errors,
    "pc_wer": lambda u: u.errors["p_c"],
}


def _matched_utts(a: CorpusScore, b: CorpusScore) -> List[Tuple[UttScore, UttScore]]:
    """Each utterance's scores in A and B, in A's order (the paired tests' segments); refused unless both
    systems were scored on the same utterances, each once."""
    ids_a = [u.utt_id for u in a.utts]
    by_id = {u.utt_id: u for u in b.utts}
    if len(set(ids_a)) != len(ids_a) or set(ids_a) != set(by_id) or len(by_id) != len(b.utts):
        raise ValueError("The two systems were scored on different utterance sets")
    return [(u, by_id[u.utt_id]) for u in a.utts]


def compare_systems(
    a: CorpusScore, b: CorpusScore, level: float = 0.05
) -> Dict[str, Dict[str, object]]:
    """MAPSSWE for the four Cui metrics between two systems on the same utterances."""
    pairs = _matched_utts(a, b)
    out: Dict[str, Dict[str, object]] = {}
    for name, get in SIGNIFICANCE_METRICS.items():
        r = mapsswe([get(ua) for ua, _ in pairs], [get(ub) for _, ub in pairs])
        better = "same"
        if r["p_value"] < level:
            better = "A" if r["mean_diff"] < 0 else "B"
        out[name] = {**r, "significant": r["p_value"] < level, "better": better, "level": level}
    return out


def _figure_counts(u: UttScore, figure: str) -> Tuple[int, int]:
    """The (errors, denominator) one utterance adds to a corpus figure of :meth:`CorpusScore.summary`."""
    if figure == "wer":
        return u.errors["np_nc"], u.ref_len["np_nc"]
    if figure == "pc_wer":
        return u.errors["p_c"], u.ref_len["p_c"]
    if figure == "per":
        c = sum(u.punct_correct.values())
        s = sum(u.punct_subs.values())
        errors = sum(u.punct_ref.values()) + sum(u.punct_hyp.values()) - 2 * c - s  # I + D + S
        return errors, errors + c
    raise ValueError(f"no paired bootstrap for {figure!r}: one of {', '.join(BOOTSTRAP_FIGURES)}")


BOOTSTRAP_FIGURES = ("wer", "pc_wer", "per")


def paired_bootstrap(a: CorpusScore, b: CorpusScore, figures: Sequence[str] = BOOTSTRAP_FIGURES,
                     resamples: int = 1000, seed: int = 0) -> Dict[str, Dict[str, object]]:
    """Bisani & Ney's paired bootstrap of corpus figures (percent) between systems A and B.

    Each resample draws as many utterances as there are, with replacement, the
    same draws for both systems, and recomputes each figure from the summed
    counts.  Per figure: both systems' values on the whole set, ``p_b_worse`` /
    ``p_b_better`` (the share of resamples where B's figure is above / below A's;
    resamples whose denominator is 0 are left out) and the resamples counted.
    Deterministic for a given ``seed``."""
    pairs = _matched_utts(a, b)
    if resamples < 1:
        raise ValueError(f"resamples must be at least 1, not {resamples}")
    rng = random.Random(seed)
    draws = [rng.choices(range(len(pairs)), k=len(pairs)) for _ in range(resamples)] if pairs else []
    out: Dict[str, Dict[str, object]] = {}
    for figure in figures:
        ca = [_figure_counts(ua, figure) for ua, _ in pairs]
        cb = [_figure_counts(ub, figure) for _, ub in pairs]

        def value(counts: Sequence[Tuple[int, int]], idx: Iterable[int]) -> Optional[float]:
            e = d = 0
            for i in idx:
                e += counts[i][0]
                d += counts[i][1]
            return _pct(e, d)

        worse = better = counted = 0
        for idx in draws:
            va, vb = value(ca, idx), value(cb, idx)
            if va is None or vb is None:
                continue
            counted += 1
            worse += vb > va
            better += vb < va
        every = range(len(pairs))
        out[figure] = {"a": value(ca, every), "b": value(cb, every), "resamples": counted,
                       "p_b_worse": worse / counted if counted else None,
                       "p_b_better": better / counted if counted else None}
    return out


# ---------------------------------------------------------------- error file


def write_error_file(path: str, pairs: Sequence[Tuple[str, str, str]], score: CorpusScore) -> None:
    """Write an icefall-style per-utterance error file for the P-C view.

    Header with every metric, then one line per utterance showing
    ``(ref->hyp)`` for errors, then substitution / deletion / insertion
    counts and the punctuation substitution matrix.
    """
    summ = score.summary()
    subs: Counter = Counter()
    dels: Counter = Counter()
    ins: Counter = Counter()
    lines: List[str] = []
    for (utt_id, ref, hyp) in pairs:
        rv = Views.of(ref, score.config)
        hv = Views.of(hyp, score.config)
        if not rv.p_c and not hv.p_c:
            lines.append(f"{utt_id}:\t")
            continue
        if not hv.p_c:
            ali = [(r, _EPS) for r in rv.p_c]
        elif not rv.p_c:
            ali = [(_EPS, h) for h in hv.p_c]
        else:
            ali = kaldialign.align(rv.p_c, hv.p_c, _EPS)
        toks = []
        for r, h in ali:
            if r == h:
                toks.append(r)
            else:
                toks.append(f"({r}->{h})".replace(_EPS, "*"))
                if r == _EPS:
                    ins[h] += 1
                elif h == _EPS:
                    dels[r] += 1
                else:
                    subs[(r, h)] += 1
        lines.append(f"{utt_id}:\t" + " ".join(toks))
    with open(path, "w", encoding="utf-8") as f:
        t = summ["counts"]  # type: ignore[index]
        f.write(f"%WER = {fmt(summ['wer'])}\n")
        f.write(f"%WER-C = {fmt(summ['wer_c'])}\n")
        f.write(f"%WER-P = {fmt(summ['wer_p'])}\n")
        f.write(f"%PC-WER = {fmt(summ['pc_wer'])} [ {t['E_p_c']} / {t['N_p_c']} ]\n")
        f.write(f"%PuncER = {fmt(summ['punc_er'])} [ ({t['E_p_nc']} - {t['E_np_nc']}) / {t['N_p']} ]\n")
        f.write(f"%CaseER = {fmt(summ['case_er'])} [ ({t['E_np_c']} - {t['E_np_nc']}) / {t['N_c']} ]\n")
        pc = summ["per_counts"]  # type: ignore[index]
        f.write(f"%PER = {fmt(summ['per'])} [ C={pc['C']} S={pc['S']} D={pc['D']} I={pc['I']} ]\n")
        f.write("\nPER-UTT DETAILS (punctuated-cased view): corr or (ref->hyp)\n")
        f.write("\n".join(lines) + "\n")
        f.write("\nSUBSTITUTIONS: count ref -> hyp\n")
        for (r, h), n in sorted(subs.items(), key=lambda x: (-x[1], x[0])):
            f.write(f"{n}   {r} -> {h}\n")
        f.write("\nDELETIONS: count ref\n")
        for r, n in sorted(dels.items(), key=lambda x: (-x[1], x[0])):
            f.write(f"{n}   {r}\n")
        f.write("\nINSERTIONS: count hyp\n")
        for h, n in sorted(ins.items(), key=lambda x: (-x[1], x[0])):
            f.write(f"{n}   {h}\n")
        f.write("\nPUNCTUATION (LibriSpeech-PC PER, rates in %)\n")
        f.write(per_mark_table(summ) + "\n")
