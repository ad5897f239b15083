#!/usr/bin/env python3
"""Print statistics of cut manifests: hours, utterances, speakers, references, marks.

Usage:
  ./local/manifest_stats.py data/synth/fbank/synth_cuts_*.jsonl.gz
  ./local/manifest_stats.py --json data/librispeech/fbank/librispeech_cuts_test-clean.jsonl.gz
"""

import argparse
import json
from collections import Counter
from pathlib import Path
from typing import Dict, List

from zipformer_pc.data.references import get_n, get_p
from zipformer_pc.text import MARKS, PunctConfig, words_and_marks

_ALL_MARKS = PunctConfig(keep=MARKS)


def stats_of(path: str) -> Dict[str, object]:
    from lhotse import load_manifest_lazy

    n = 0
    seconds = 0.0
    speakers = set()
    with_p = 0
    words = 0
    marks: Counter = Counter()
    durations = []
    for cut in load_manifest_lazy(path):
        n += 1
        seconds += cut.duration
        durations.append(cut.duration)
        for s in cut.supervisions:
            speakers.add(s.speaker)
            words += len(get_n(s).split())
            p = get_p(s)
            if p is not None:
                with_p += 1
                marks.update(m for _, m in words_and_marks(p, _ALL_MARKS) if m)
    durations.sort()
    return {
        "manifest": path,
        "utterances": n,
        "hours": round(seconds / 3600, 3),
        "speakers": len(speakers),
        "words": words,
        "with_p": with_p,
        "marks": {m: marks[m] for m in MARKS if marks[m]},
        "duration_min": round(durations[0], 2) if durations else None,
        "duration_median": round(durations[len(durations) // 2], 2) if durations else None,
        "duration_max": round(durations[-1], 2) if durations else None,
    }


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("manifests", nargs="+")
    p.add_argument("--json", action="store_true")
    return p


def format_table(rows: List[Dict[str, object]]) -> str:
    """The markdown table of :func:`stats_of` rows (prepare.sh's stats.md)."""
    lines = ["| manifest | utts | hours | speakers | words | with P | . | , | ? | other marks | dur min/med/max (s) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        mk = dict(r["marks"])
        other = " ".join(f"{m}:{mk.pop(m)}" for m in list(mk) if m not in ".,?") or "-"
        lines.append(
            f"| {Path(r['manifest']).name} | {r['utterances']} | {r['hours']:.2f} | {r['speakers']} | {r['words']} "
            f"| {r['with_p']} | {mk.get('.', 0)} | {mk.get(',', 0)} | {mk.get('?', 0)} | {other} "
            f"| {r['duration_min']}/{r['duration_median']}/{r['duration_max']} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    args = get_parser().parse_args()
    rows = [stats_of(m) for m in args.manifests]
    if args.json:
        print(json.dumps(rows, indent=1))
        return
    print(format_table(rows), end="")


if __name__ == "__main__":
    main()
