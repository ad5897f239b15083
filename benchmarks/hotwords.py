#!/usr/bin/env python3
"""Hotwords (contextual biasing) measured: the phrases' recall in P and N with and without the list,
and what the list costs the utterances that have none of its phrases.

Usage:
  python benchmarks/hotwords.py --model-dir egs/synth/pretrained \\
      --cuts data/synth/fbank/synth_cuts_test_ood.jsonl.gz --hotwords benchmarks/moby_dick_hotwords.txt \\
      --hotwords-score 0,1.5,3 --output-json hotwords.json

Each value of ``--hotwords-score`` is one decoding of every cut with modified
beam search (``--beam-size`` paths, the model dir's LMs and LODR at the
runtime's defaults, the question model; the command line's settings) and the
list at that bonus per token (a phrase with its own ``:bonus`` keeps it); 0
decodes without the list.  Then, per decoding:

* recall, per mode: of the phrases' occurrences in the references (P: the
  phrase's P form, cased, in the P reference; N: its normalized form in the N
  reference; whole words, marks ignored, a possessive ``'s`` counted as the
  word), how many the output has in the same utterance (per utterance and
  phrase, the smaller of the two counts);
* false alarms: occurrences in the output beyond the reference's, per mode;
* WER (N) and PC-WER (P) on the utterances whose N reference has none of the
  phrases (the list must not cost them), and on all of them;
* the RTF of the decoding.

A second table gives each phrase's occurrences and how many each decoding
found.  Prints the tables (markdown); asserts nothing.
"""

import argparse
import json
import logging
import re
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

from zipformer_pc.logs import setup_logging
from zipformer_pc.metrics import fmt
from zipformer_pc.runtime import utterances
from zipformer_pc.runtime.hotwords import mode_form, read_hotwords
from zipformer_pc.runtime.recognizer import StreamingRecognizer, add_search_options, search_kwargs

ROOT = Path(__file__).resolve().parents[1]

MODES = ("P", "N")


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                conflict_handler="resolve")
    p.add_argument("--model-dir", type=Path, default=ROOT / "egs/synth/pretrained", help="[egs/synth/pretrained]")
    p.add_argument("--cuts", required=True, help="a cut manifest with P and N references")
    p.add_argument("--int8", type=lambda s: s.lower() in ("1", "true", "yes"), default=False)
    p.add_argument("--num-threads", type=int, default=1, help="encoder intra-op threads")
    p.add_argument("--max-utts", type=int, default=0, help="the first N cuts only (0: all)")
    add_search_options(p)
    p.set_defaults(decoding_method="modified_beam_search")
    p.add_argument("--hotwords", type=Path, required=True, help="the hotword list (one phrase a line)")
    p.add_argument("--hotwords-score", default="0,1.5",
                   help="comma list of bonuses per token, one decoding each (0: without the list)")
    p.add_argument("--output-json", type=Path, default=None, help="the rows and per-phrase counts as JSON")
    return p


def words(text: str) -> List[str]:
    """The words of a text, marks dropped, hyphenated words split, a possessive ``'s`` removed."""
    out = []
    for w in re.findall(r"[A-Za-z0-9']+", text):
        w = w.strip("'")
        if w.endswith("'s"):
            w = w[:-2]
        if w:
            out.append(w)
    return out


def count(phrase: Sequence[str], text_words: Sequence[str]) -> int:
    n = len(phrase)
    return sum(1 for i in range(len(text_words) - n + 1) if list(text_words[i : i + n]) == list(phrase))


def phrase_counts(decoded, phrases: Dict[str, Dict[str, List[str]]]) -> Dict[str, Dict[str, List[Tuple[int, int]]]]:
    """mode -> phrase -> per utterance (occurrences in the reference, in the output)."""
    out: Dict[str, Dict[str, List[Tuple[int, int]]]] = {m: {ph: [] for ph in phrases} for m in MODES}
    for d in decoded:
        refs = {"P": d.utt.ref_p or "", "N": d.utt.ref_n or ""}
        for m in MODES:
            ref_w, hyp_w = words(refs[m]), words(d.hyps.get(m, ""))
            for ph, forms in phrases.items():
                out[m][ph].append((count(forms[m], ref_w), count(forms[m], hyp_w)))
    return out


def summarize(counts) -> Dict[str, Dict[str, int]]:
    """Per mode: occurrences, found (recall's numerator) and false alarms, over every phrase."""
    out = {}
    for m, by_phrase in counts.items():
        c = Counter()
        for per_utt in by_phrase.values():
            for ref, hyp in per_utt:
                c["occurrences"] += ref
                c["found"] += min(ref, hyp)
                c["false_alarms"] += max(0, hyp - ref)
        out[m] = dict(c)
    return out


def pct(a: float, b: float):
    return round(100.0 * a / b, 2) if b else None


def main(argv=None) -> int:
    args = get_parser().parse_args(argv)
    setup_logging()
    hotwords_path = args.hotwords
    hotwords = read_hotwords(hotwords_path)
    bonuses = [float(x) for x in args.hotwords_score.split(",") if x.strip()]
    phrases = {hw.phrase: {m: words(mode_form(hw.phrase, m)) for m in MODES} for hw in hotwords}
    utts = utterances.read_once(utterances.from_cuts(args.cuts, args.max_utts))
    args.hotwords = None  # search_kwargs: the settings without the list, which is added per row
    base = search_kwargs(args, args.model_dir)
    rows, per_phrase = [], {}
    clean = None  # the ids of the utterances whose N reference has none of the phrases
    for bonus in bonuses:
        kwargs = dict(base)
        if bonus > 0:
            kwargs.update(hotwords=hotwords, hotwords_score=bonus)
        rec = StreamingRecognizer.from_dir(args.model_dir, args.int8, num_threads=args.num_threads, **kwargs)
        t0 = time.time()
        run = utterances.decode(rec, utts)
        logging.info("bonus %g: %d utterances in %.0f s, RTF %.3f", bonus, len(run.decoded), time.time() - t0,
                     run.rtf)
        counts = phrase_counts(run.decoded, phrases)
        if clean is None:
            clean = {d.utt.uid for k, d in enumerate(run.decoded)
                     if not any(counts["N"][ph][k][0] for ph in phrases)}
        totals = summarize(counts)
        every = utterances.score(run.decoded)
        without = utterances.score([d for d in run.decoded if d.utt.uid in clean])
        row = {"bonus": bonus, "rtf": round(run.rtf, 4), "utterances": len(run.decoded),
               "clean_utterances": len(clean)}
        for m in MODES:
            row[f"recall_{m}"] = pct(totals[m].get("found", 0), totals[m].get("occurrences", 0))
            row[f"found_{m}"] = totals[m].get("found", 0)
            row[f"occurrences_{m}"] = totals[m].get("occurrences", 0)
            row[f"false_alarms_{m}"] = totals[m].get("false_alarms", 0)
        row.update(wer_clean=without.get("N", {}).get("wer"), pc_wer_clean=without.get("P", {}).get("pc_wer"),
                   wer_all=every.get("N", {}).get("wer"), pc_wer_all=every.get("P", {}).get("pc_wer"))
        rows.append(row)
        for ph in phrases:
            for m in MODES:
                entry = per_phrase.setdefault(ph, {}).setdefault(m, {"occurrences": sum(r for r, _ in counts[m][ph])})
                entry[f"found@{bonus:g}"] = sum(min(r, h) for r, h in counts[m][ph])
                entry[f"false_alarms@{bonus:g}"] = sum(max(0, h - r) for r, h in counts[m][ph])

    n = rows[0]["utterances"] if rows else 0
    print(f"\n{n} utterances of {args.cuts}, {len(phrases)} phrases ({hotwords_path}); "
          f"{rows[0]['clean_utterances'] if rows else 0} utterances without any of them\n")
    print("| hotwords | recall P | recall N | false alarms P / N | WER / PC-WER without hotwords "
          "| WER / PC-WER all | RTF |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        name = "none" if r["bonus"] <= 0 else f"bonus {r['bonus']:g}"
        print(f"| {name} | {fmt(r['recall_P'])} ({r['found_P']}/{r['occurrences_P']}) "
              f"| {fmt(r['recall_N'])} ({r['found_N']}/{r['occurrences_N']}) "
              f"| {r['false_alarms_P']} / {r['false_alarms_N']} | {fmt(r['wer_clean'])} / {fmt(r['pc_wer_clean'])} "
              f"| {fmt(r['wer_all'])} / {fmt(r['pc_wer_all'])} | {r['rtf']:.3f} |")
    labels = [f"{b:g}" for b in bonuses]
    print("\n| phrase | P: in refs | " + " | ".join(f"found @{b}" for b in labels) + " | N: in refs | "
          + " | ".join(f"found @{b}" for b in labels) + " |")
    print("|---|" + "---|" * (2 * len(labels) + 2))
    for ph, by_mode in per_phrase.items():
        cells = []
        for m in MODES:
            e = by_mode[m]
            cells += [str(e["occurrences"])] + [str(e[f"found@{b}"]) for b in labels]
        print(f"| {ph} | " + " | ".join(cells) + " |")
    if args.output_json:
        args.output_json.write_text(json.dumps({"cuts": str(args.cuts), "hotwords": str(hotwords_path),
                                                "rows": rows, "phrases": per_phrase}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
