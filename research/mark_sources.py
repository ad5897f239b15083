#!/usr/bin/env python3
"""Where a system's inserted marks fall in the raw source text.

Usage:
  python research/mark_sources.py --cuts data/synth/fbank/synth_cuts_test.jsonl.gz \
      --hyps exp/conditioned/runtime-modified_beam_search-test.tsv

P keeps LibriSpeech-PC's marks (`. , ?`) and drops the others, but the
synthetic corpus's voices read the source text with its `;` and `:` and pause
there.  For every mark of P (default `,`) that the hypothesis puts after a
correctly recognised word where the P reference has none, this prints what
the raw source (the cuts' ``custom["text_raw"]``, read by
``zipformer_pc.data.references``) has after that word: a
dropped mark (`;`, `:`, ...) or nothing.  Words are matched on their
normalized form (``zipformer_pc.text``); utterances whose raw and P words
differ (e.g. a hyphen joined) are counted and left out.  ``--hyps``: any
transcript file that ``zipformer_pc.transcripts`` reads with mode P (the
runtime's ``--output``, decode.py's recogs, ``id<TAB>text``).
"""

import argparse
import collections
import difflib
import re
from pathlib import Path
from typing import Dict, List, Tuple

from zipformer_pc.data.references import get_p, get_raw
from zipformer_pc.text import normalized
from zipformer_pc.transcripts import TranscriptError, read_transcripts

TRAILING = re.compile(r"([^\w']+)$")


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cuts", type=Path, required=True, help="cut manifest with text_p and text_raw")
    p.add_argument("--hyps", type=Path, required=True, help="the system's P transcripts")
    p.add_argument("--mark", default=",", help="the inserted mark to trace [,]")
    return p


def words_and_marks(text: str) -> List[Tuple[str, str]]:
    """(normalized word, the marks written after it) for each word of ``text``."""
    out = []
    for tok in text.split():
        pieces = normalized(tok).split()
        m = TRAILING.search(tok)
        for i, piece in enumerate(pieces):
            out.append((piece, (m.group(1) if m else "") if i == len(pieces) - 1 else ""))
    return out


def raw_marks_at_insertions(p_ref: str, raw: str, hyp: str, mark: str) -> List[str]:
    """For each ``mark`` the hypothesis adds after a matched word where the P reference has no mark:
    what the raw text has there (its marks without quotes, or '' for nothing).  None when the raw
    and P words differ."""
    ref, src, out = words_and_marks(p_ref), words_and_marks(raw), []
    if [w for w, _ in ref] != [w for w, _ in src]:
        return None  # type: ignore[return-value]
    h = words_and_marks(hyp)
    sm = difflib.SequenceMatcher(a=[w for w, _ in ref], b=[w for w, _ in h], autojunk=False)
    for a, b, n in sm.get_matching_blocks():
        for i in range(n):
            if mark in h[b + i][1] and not ref[a + i][1].strip("'\""):
                out.append(re.sub(r"['\"]", "", src[a + i][1]))
    return out


def read_sources(cuts: Path) -> Dict[str, Tuple[str, str]]:
    """cut id -> (P reference, raw source text), for single-supervision cuts that have both."""
    from lhotse import load_manifest_lazy

    out = {}
    for c in load_manifest_lazy(cuts):
        if len(c.supervisions) == 1:
            p_ref, raw = get_p(c.supervisions[0]), get_raw(c.supervisions[0])
            if p_ref and raw:
                out[c.id] = (p_ref, raw)
    return out


def main(argv=None) -> None:
    args = get_parser().parse_args(argv)
    sources = read_sources(args.cuts)
    if not sources:
        raise SystemExit(f"{args.cuts}: no cut has both custom['text_p'] and custom['text_raw']")
    try:
        hyps = read_transcripts(str(args.hyps), "hyp", mode="P")
    except (TranscriptError, OSError) as e:
        raise SystemExit(f"--hyps: {e}")
    counts: collections.Counter = collections.Counter()
    skipped = missing = 0
    for cid, (p_ref, raw) in sources.items():
        if cid not in hyps:
            missing += 1
            continue
        found = raw_marks_at_insertions(p_ref, raw, hyps[cid], args.mark)
        if found is None:
            skipped += 1
            continue
        counts.update(m or "(none)" for m in found)
    total = sum(counts.values())
    print(f"{args.hyps}: {total} '{args.mark}' inserted after correctly recognised words, in "
          f"{len(sources) - skipped - missing} utterances ({skipped} left out: raw and P words differ; "
          f"{missing} without a hypothesis)")
    print("| the raw text there | inserted | share |")
    print("|---|---|---|")
    for m, n in counts.most_common():
        print(f"| {m} | {n} | {100 * n / total:.1f}% |")


if __name__ == "__main__":
    main()
