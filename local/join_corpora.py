#!/usr/bin/env python3
"""One training corpus from the training cuts of several, shuffled together.

Usage:
  ./local/join_corpora.py --out data_gc/synth --base data_g/synth \
      data20/synth g-=data_g/synth --n-only-sources gcide --seed 42

Each positional argument is a corpus directory (``prepare.sh``'s
``data/synth``, or another dataset's, e.g. ``data/games``), optionally as
``PREFIX=DIR``: its cuts then get the ids ``{PREFIX}{id}`` (cut, supervisions,
recording), so two corpora that number their utterances alike can be joined.
Their ``fbank/DATASET_cuts_train_p1`` manifests (filtered, with both
references; ``synth_cuts_train_p1`` or the one of another dataset there) are
concatenated in the order
given and shuffled by ``random.Random(--seed)``; the cuts keep their audio and
features where they are.  ``--n-only-sources`` names text sources
(``custom["source"]``: ``gcide`` or a book) whose cuts keep only their N
reference (``zipformer_pc.data.references.withhold_p``), e.g. the dictionary
text, whose marks are not the books'; ``--drop-sources`` names sources whose
cuts are left out (counted in the log), e.g. ``gcide`` for a corpus's books only.

``--out`` holds ``fbank/synth_cuts_train_p1.jsonl.gz`` (the manifest
``pretrain.sh`` trains on), links to ``--base``'s dev and test cuts,
tokenizer and punctuation config (default: the first corpus's), and
``stats.md``.  The punctuated-proportion subsets are not made.
"""

import argparse
import logging
import random
from collections import Counter
from pathlib import Path
from typing import Dict, List, Sequence, Set, Tuple

# add_readings.py is this script's sibling: its folder is on sys.path when run as `python local/join_corpora.py`
from add_readings import PREFIX, link_sets, read_cuts, write_cuts, write_stats

from zipformer_pc.logs import setup_logging

TRAIN = "train_p1"


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("corpora", nargs="+", help="corpus directories, each DIR or PREFIX=DIR")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--base", type=Path, help="corpus whose dev/test sets and tokenizer are linked [the first]")
    p.add_argument("--n-only-sources", default="", help="comma list of text sources whose cuts keep N only")
    p.add_argument("--drop-sources", default="", help="comma list of text sources whose cuts are left out")
    p.add_argument("--seed", type=int, default=42)
    return p


def parse_corpus(spec: str) -> Tuple[str, Path]:
    """``PREFIX=DIR`` or ``DIR`` -> (prefix, directory)."""
    prefix, sep, d = spec.partition("=")
    return (prefix, Path(d)) if sep else ("", Path(spec))


def train_manifest(d: Path) -> Path:
    """The filtered training cuts of the corpus ``d``: ``fbank/synth_cuts_train_p1.jsonl.gz``, or
    those of the one other dataset there (``games_cuts_train_p1``, ``custom_cuts_train_p1``, ...)."""
    synth = d / "fbank" / f"{PREFIX}{TRAIN}.jsonl.gz"
    if synth.is_file():
        return synth
    found = sorted((d / "fbank").glob(f"*_cuts_{TRAIN}.jsonl.gz"))
    if not found:
        raise SystemExit(f"{d} has no fbank/DATASET_cuts_{TRAIN}.jsonl.gz (e.g. {synth.name}): prepare it first "
                         "(prepare.sh)")
    if len(found) > 1:
        raise SystemExit(f"{d} has the training cuts of several datasets ({', '.join(f.name for f in found)}): "
                         "give one corpus directory per dataset")
    return found[0]


def prefixed(cut: Dict, prefix: str) -> Dict:
    """The cut under the id ``{prefix}{id}``: its supervisions and recording too."""
    if not prefix:
        return cut
    cut["id"] = prefix + cut["id"]
    for s in cut["supervisions"]:
        s["id"] = prefix + s["id"]
        s["recording_id"] = prefix + s["recording_id"]
    if "recording" in cut:
        cut["recording"]["id"] = prefix + cut["recording"]["id"]
    if "recording_id" in cut.get("features", {}):
        cut["features"]["recording_id"] = prefix + cut["features"]["recording_id"]
    return cut


def n_only(cut: Dict) -> Dict:
    from lhotse import MonoCut

    from zipformer_pc.data.references import withhold_p

    return withhold_p(MonoCut.from_dict(cut)).to_dict()


def join_corpora(corpora: Sequence[Tuple[str, Path]], out: Path, base: Path,
                 n_only_sources: Set[str], seed: int, drop_sources: Set[str] = frozenset()) -> Counter:
    if n_only_sources & drop_sources:
        raise SystemExit(f"Sources both N only and dropped: {', '.join(sorted(n_only_sources & drop_sources))}")
    dirs = [d for _, d in corpora] + [base]
    manifests = {d: train_manifest(d) for d in dirs}
    if out.resolve() in {d.resolve() for d in dirs}:
        raise SystemExit("--out must be a directory of its own")
    counts: Counter = Counter()
    cuts: List[Dict] = []
    ids: Set[str] = set()
    for prefix, d in corpora:
        counts[f"from {d}"] = 0
        for cut in read_cuts(manifests[d]):
            cut = prefixed(cut, prefix)
            if cut["id"] in ids:
                raise SystemExit(f"Cut id {cut['id']} twice (from {d}): give the corpora id prefixes (PREFIX=DIR)")
            ids.add(cut["id"])
            source = cut["supervisions"][0].get("custom", {}).get("source")
            if source in drop_sources:
                counts[f"dropped ({source})"] += 1
                continue
            if source in n_only_sources:
                cut = n_only(cut)
                counts[f"N only ({source})"] += 1
            cuts.append(cut)
            counts[f"from {d}"] += 1
        logging.info(f"{d}: {counts[f'from {d}']} cuts")
    for s in sorted(n_only_sources):
        if not counts[f"N only ({s})"]:
            logging.warning(f"No cut has the text source {s} (--n-only-sources)")
    for s in sorted(drop_sources):
        if not counts[f"dropped ({s})"]:
            logging.warning(f"No cut has the text source {s} (--drop-sources)")
    if not cuts:
        raise SystemExit("No cut is left to train on (--drop-sources)")
    random.Random(seed).shuffle(cuts)
    fbank = out / "fbank"
    fbank.mkdir(parents=True, exist_ok=True)
    write_cuts(fbank / f"{PREFIX}{TRAIN}.jsonl.gz", cuts)
    counts["cuts"] = len(cuts)
    link_sets(base, out)
    write_stats(out, TRAIN)
    return counts


def main() -> None:
    setup_logging()
    args = get_parser().parse_args()
    corpora = [parse_corpus(s) for s in args.corpora]
    sources = {s.strip() for s in args.n_only_sources.split(",") if s.strip()}
    drop = {s.strip() for s in args.drop_sources.split(",") if s.strip()}
    counts = join_corpora(corpora, args.out, args.base or corpora[0][1], sources, args.seed, drop)
    logging.info(f"{args.out}: " + ", ".join(f"{k} {v}" for k, v in counts.items()))


if __name__ == "__main__":
    main()
