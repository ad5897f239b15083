#!/usr/bin/env python3
"""LibriSpeech manifests with LibriSpeech-PC punctuated references joined on.

Usage:
  ./local/prepare_librispeech.py --corpus-dir download/LibriSpeech \
      --pc-dir download/LibriSpeech-PC --output-dir data/librispeech/manifests \
      --parts test-clean,test-other,dev-clean,dev-other,train-clean-100 --nj 4

The LibriSpeech tree (``<part>/<spk>/<chapter>/<utt>.flac`` and
``<spk>-<chapter>.trans.txt``) is read with lhotse's LibriSpeech recipe.
LibriSpeech-PC manifests (OpenSLR 145) are NeMo JSON lines with
``audio_filepath``, ``duration`` and ``text``; every ``*.json`` /
``*.jsonl`` file under ``--pc-dir`` is read and joined onto the supervisions
by utterance id (the audio file's stem).

Each supervision gets N from LibriSpeech's own transcript and P from the
LibriSpeech-PC text, both through the recipe's one normalization
(zipformer_pc.data.references).  Utterances that LibriSpeech-PC dropped keep N
only.  Malformed PC lines are counted and logged, never fatal.  Writes
``librispeech_{recordings,supervisions}_{part}.jsonl.gz`` and
``pc_join.json`` (counts per part).
"""

import argparse
import json
import logging
from pathlib import Path
from typing import Dict, Tuple

from zipformer_pc.data.references import reference_fields
from zipformer_pc.logs import setup_logging


def read_pc_manifests(pc_dir: Path) -> Tuple[Dict[str, str], int]:
    """``{utt_id: punctuated text}`` from every NeMo manifest under ``pc_dir``."""
    texts: Dict[str, str] = {}
    bad = 0
    files = sorted(list(pc_dir.rglob("*.json")) + list(pc_dir.rglob("*.jsonl")))
    if not files:
        raise SystemExit(f"No LibriSpeech-PC manifest (*.json) under {pc_dir}")
    for path in files:
        with open(path, encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    item = json.loads(line)
                    utt_id = Path(item["audio_filepath"]).stem
                    text = item["text"]
                    if not isinstance(text, str):
                        raise TypeError("text is not a string")
                except (ValueError, KeyError, TypeError) as e:
                    bad += 1
                    logging.warning(f"{path}:{lineno}: skipping malformed LibriSpeech-PC line ({e})")
                    continue
                texts[utt_id] = text
    logging.info(f"Read {len(texts)} LibriSpeech-PC transcripts from {len(files)} file(s); {bad} malformed lines")
    return texts, bad


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--corpus-dir", required=True, help="Directory holding the LibriSpeech parts")
    p.add_argument("--pc-dir", required=True, help="Directory holding the LibriSpeech-PC manifests")
    p.add_argument("--output-dir", required=True)
    p.add_argument("--parts", default="test-clean,test-other,dev-clean,dev-other,train-clean-100,train-clean-360,train-other-500")
    p.add_argument("--nj", type=int, default=2)
    return p


def main() -> None:
    setup_logging()
    args = get_parser().parse_args()
    from lhotse import SupervisionSet
    from lhotse.recipes import prepare_librispeech

    corpus_dir = Path(args.corpus_dir)
    if not corpus_dir.is_dir():
        raise SystemExit(f"No LibriSpeech directory at {corpus_dir}: run prepare.sh --dataset librispeech --stage 0")
    parts = [p for p in args.parts.split(",") if p]
    missing = [p for p in parts if not (corpus_dir / p).is_dir()]
    if missing:
        raise SystemExit(f"LibriSpeech parts not found under {corpus_dir}: {', '.join(missing)}")
    pc, bad_lines = read_pc_manifests(Path(args.pc_dir))

    out_dir = Path(args.output_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    manifests = prepare_librispeech(corpus_dir, dataset_parts=parts, output_dir=None, num_jobs=args.nj)
    report = {"malformed_pc_lines": bad_lines, "parts": {}}
    used = set()
    for part in parts:
        recs = manifests[part]["recordings"]
        sups = manifests[part]["supervisions"]
        new_sups = []
        n_p = 0
        for s in sups:
            raw_p = pc.get(s.id)
            refs = reference_fields(raw_p, raw_normalized=s.text)
            if refs["custom"]:
                n_p += 1
                used.add(s.id)
            new_sups.append(_replace(s, refs))
        SupervisionSet.from_segments(new_sups).to_file(out_dir / f"librispeech_supervisions_{part}.jsonl.gz")
        recs.to_file(out_dir / f"librispeech_recordings_{part}.jsonl.gz")
        report["parts"][part] = {"utterances": len(new_sups), "with_p": n_p, "without_p": len(new_sups) - n_p}
        logging.info(f"{part}: {len(new_sups)} utterances, {n_p} with a LibriSpeech-PC reference")
    report["pc_not_in_parts"] = len(set(pc) - used)
    (out_dir / "pc_join.json").write_text(json.dumps(report, indent=1) + "\n")


def _replace(sup, refs):
    from dataclasses import replace

    custom = dict(sup.custom or {})
    custom.update(refs["custom"])
    return replace(sup, text=refs["text"], custom=custom or None)


if __name__ == "__main__":
    main()
