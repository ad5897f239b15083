#!/usr/bin/env python3
"""A corpus whose training text is also read by other voices, taken from another corpus.

Usage:
  ./local/add_readings.py --base data_all/synth --readings data_extra/synth --speakers extra \
      --out data_allx/synth

``--out`` gets the training cuts of ``--base`` plus every training cut of
``--readings`` (its ``_p1`` manifest: filtered, with both references) read by
one of ``--speakers`` whose text is one of ``--base``'s training texts: the
same sentences, heard from more voices.  ``extra`` names the speakers of the
other TTS engines (``local/tts.py``'s EXTRA_VOICES, ``prepare.sh
--extra-voices``), ``kokoro`` those of the Kokoro model (KOKORO_VOICES,
``prepare.sh --kokoro-voices``); else a comma list of speaker names.  Added cuts keep their
audio and features where they are (the manifests point to them) and get the
ids ``{id}_{speaker}``.  ``--out`` holds ``fbank/synth_cuts_train.jsonl.gz``
and ``..._train_p1.jsonl.gz`` (the manifest ``pretrain.sh`` trains on), links
to ``--base``'s dev and test cuts, tokenizer and punctuation config,
and ``stats.md``.  The punctuated-proportion subsets are not made.
"""

import argparse
import gzip
import itertools
import json
import logging
import os
from collections import Counter
from pathlib import Path
from typing import Dict, Iterable, Iterator, List, Set

# prepare_synth_text.py is this script's sibling: its folder is on sys.path when run as `python local/add_readings.py`
from prepare_synth_text import SPLITS

from zipformer_pc.logs import setup_logging

PREFIX = "synth_cuts_"
# the dev and test sets, linked from the base corpus unchanged
HELD_OUT = tuple(s for s in SPLITS if s != "train")


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--base", type=Path, required=True, help="corpus whose training cuts are all kept")
    p.add_argument("--readings", type=Path, required=True, help="corpus the added readings come from")
    p.add_argument("--speakers", default="extra", help="'extra', 'kokoro' or a comma list of speaker names")
    p.add_argument("--out", type=Path, required=True)
    return p


def read_cuts(path: Path) -> Iterator[Dict]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for line in f:
            if line.strip():
                yield json.loads(line)


def write_cuts(path: Path, cuts: Iterable[Dict]) -> None:
    """Cut dicts as a gzipped JSONL manifest, written beside and then moved into place."""
    tmp = path.with_name(path.name + ".part")
    with gzip.open(tmp, "wt", encoding="utf-8") as f:
        for cut in cuts:
            f.write(json.dumps(cut) + "\n")
    os.replace(tmp, path)


def text_of(cut: Dict) -> str:
    """The text the voice read (the book's, before normalization)."""
    sup = cut["supervisions"][0]
    return sup.get("custom", {}).get("text_raw") or sup["text"]


def speakers_named(spec: str) -> Set[str]:
    if spec in ("extra", "kokoro"):
        from tts import EXTRA_VOICES, KOKORO_VOICES

        return {v.name for v in (EXTRA_VOICES if spec == "extra" else KOKORO_VOICES)}
    names = {s.strip() for s in spec.split(",") if s.strip()}
    if not names:
        raise SystemExit("--speakers names no speaker")
    return names


def renamed(cut: Dict) -> Dict:
    """The cut (and its supervision) under the id ``{id}_{speaker}``."""
    cut = json.loads(json.dumps(cut))
    new = f"{cut['id']}_{cut['supervisions'][0]['speaker']}"
    cut["id"] = new
    for s in cut["supervisions"]:
        s["id"] = new
    return cut


def add_readings(base: Path, readings: Path, speakers: Set[str], out: Path) -> Counter:
    for d, name in ((base, "--base"), (readings, "--readings")):
        if not (d / "fbank" / f"{PREFIX}train_p1.jsonl.gz").is_file():
            raise SystemExit(f"{name} {d} has no fbank/{PREFIX}train_p1.jsonl.gz: prepare it first (prepare.sh)")
    if out.resolve() in (base.resolve(), readings.resolve()):
        raise SystemExit("--out must be a directory of its own")
    counts: Counter = Counter()
    texts = {text_of(c) for c in read_cuts(base / "fbank" / f"{PREFIX}train_p1.jsonl.gz")}
    added: List[Dict] = []
    seen_speakers: Set[str] = set()
    for cut in read_cuts(readings / "fbank" / f"{PREFIX}train_p1.jsonl.gz"):
        speaker = cut["supervisions"][0]["speaker"]
        if speaker not in speakers:
            counts["other speaker"] += 1
        elif text_of(cut) not in texts:
            counts["text not in --base"] += 1
        else:
            added.append(renamed(cut))
            seen_speakers.add(speaker)
    counts["added"] = len(added)
    if not added:
        raise SystemExit(f"No training cut of {readings} is read by {', '.join(sorted(speakers))} "
                         f"with a text of {base}")
    missing = sorted(speakers - seen_speakers)
    if missing:
        logging.warning(f"No added reading by {', '.join(missing)}")
    fbank = out / "fbank"
    fbank.mkdir(parents=True, exist_ok=True)
    for split in ("train", "train_p1"):
        ids = set()

        def unique(cuts: Iterable[Dict]) -> Iterator[Dict]:
            for cut in cuts:
                if cut["id"] in ids:
                    raise SystemExit(f"Cut id {cut['id']} twice in {split}")
                ids.add(cut["id"])
                yield cut

        write_cuts(fbank / f"{PREFIX}{split}.jsonl.gz",
                   unique(itertools.chain(read_cuts(base / "fbank" / f"{PREFIX}{split}.jsonl.gz"), added)))
        counts[f"cuts in {split}"] = len(ids)
    link_sets(base, out)
    write_stats(out, "train")
    return counts


def link_sets(base: Path, out: Path) -> None:
    """Links in ``out`` to ``base``'s dev and test cuts (dev_ood when it has them), tokenizer and punctuation config."""
    links = [base / "fbank" / f"{PREFIX}{s}.jsonl.gz" for s in HELD_OUT]
    links += sorted(base.glob("lang_bpe_*")) + [base / "punct_config.json"]
    for src in links:
        if not src.exists():
            continue
        dst = (out / "fbank" if src.parent.name == "fbank" else out) / src.name
        if dst.is_symlink() or dst.exists():
            dst.unlink()
        dst.symlink_to(src.resolve())


def write_stats(out: Path, train: str) -> None:
    """``out/stats.md``: the table of ``local/manifest_stats.py`` for the ``train`` cuts and the test sets."""
    from manifest_stats import format_table, stats_of

    parts = [out / "fbank" / f"{PREFIX}{s}.jsonl.gz" for s in (train, *HELD_OUT)]
    (out / "stats.md").write_text(format_table([stats_of(str(p)) for p in parts if p.exists()]))


def main() -> None:
    setup_logging()
    args = get_parser().parse_args()
    counts = add_readings(args.base, args.readings, speakers_named(args.speakers), args.out)
    logging.info(f"{args.out}: " + ", ".join(f"{k} {v}" for k, v in counts.items()))


if __name__ == "__main__":
    main()
