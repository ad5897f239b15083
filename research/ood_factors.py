#!/usr/bin/env python3
"""Why is test_ood hard: the held-out voices, or the held-out text?

Usage:
  # the shipped model on the corpus of prepare.sh (150 utterances per cell)
  python research/ood_factors.py --data-dir data/synth
  python research/ood_factors.py --model-dir egs/synth/exp/conditioned/onnx --data-dir ~/zpc/data_all/synth \
      --num-utts 300 --work-dir /tmp/ood_factors

``test_ood`` differs from ``test`` in two ways at once: other voices (espeak-ng
Lancaster and West Midlands, festival ked, flite slt and rms) and other text
(Moby Dick instead of Austen).  This script fills the other two cells of that
2 x 2 table by synthesizing the first ``--num-utts`` texts of ``test_ood``
with the in-domain voices and those of ``test`` with the held-out voices
(``local/synthesize.py``, the corpus's ``--seed``; the audio is kept in
``--work-dir``, so a second run only decodes), then decodes the four cells with
the ONNX streaming recognizer (greedy search unless told otherwise, 0.1 s
pieces) and prints WER (N), PC-WER and PER (P) per cell and per voice.

Reading the table: the in-domain voices on Moby Dick minus ``test`` is what
the text costs; the held-out voices on Austen minus ``test`` is what the voices
cost.  A fifth cell, ``voices_kokoro``, has the same Austen texts read by the
four held-out speakers of the neural Kokoro model (``local/tts.py``'s
KOKORO_OOD_VOICES; natural-sounding voices, none of which reads training
speech); ``--kokoro auto`` (the default) adds it when tools/setup_env.sh has
installed the Kokoro files.

A second table splits each cell's WER by the reference words the training
text never has (``--train-text``, by default the corpus's ``text/train.jsonl``):
their share of the running words, how often each kind is wrong, and how many
WER points each kind and the insertions make.  Prints the figures; asserts
nothing.
"""

import argparse
import itertools
import json
import logging
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Tuple

from zipformer_pc.data.references import SYNTH_PUNCT, reference_fields
from zipformer_pc.data.utterances import read_utterances
from zipformer_pc.logs import setup_logging
from zipformer_pc.metrics import Views, fmt, word_errors
from zipformer_pc.modes import add_derived
from zipformer_pc.runtime import utterances
from zipformer_pc.runtime.recognizer import StreamingRecognizer, add_search_options, search_kwargs

ROOT = Path(__file__).resolve().parents[1]

# (cell, voices, text): the two cells of the corpus and the two this script synthesizes
CELLS: Tuple[Tuple[str, str, str], ...] = (
    ("test", "in-domain", "Austen"),
    ("voices_ood", "held-out", "Austen"),
    ("text_ood", "in-domain", "Moby Dick"),
    ("test_ood", "held-out", "Moby Dick"),
)
KOKORO_CELL = ("voices_kokoro", "held-out Kokoro", "Austen")


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model-dir", type=Path, default=ROOT / "egs/synth/pretrained",
                   help="streaming ONNX export (python -m zipformer_pc.export's layout) [egs/synth/pretrained]")
    p.add_argument("--data-dir", type=Path, required=True,
                   help="a synthetic corpus of prepare.sh (DATA_DIR/synth: text/, fbank/)")
    p.add_argument("--num-utts", type=int, default=150, help="utterances per cell (the first ones of each set)")
    p.add_argument("--work-dir", type=Path, default=None,
                   help="where the synthesized cells go (default: a temporary directory, removed)")
    p.add_argument("--num-threads", type=int, default=1, help="encoder intra-op threads")
    p.add_argument("--int8", type=lambda s: s.lower() in ("1", "true", "yes"), default=False)
    p.add_argument("--seed", type=int, default=42, help="prosody draws of the synthesized cells (prepare.sh's --seed)")
    p.add_argument("--kokoro", choices=("auto", "true", "false"), default="auto",
                   help="the voices_kokoro cell (auto: when the Kokoro voices are installed)")
    p.add_argument("--json", type=Path, default=None, help="also write the figures here")
    p.add_argument("--train-text", type=Path, action="append", default=None,
                   help="a training text of prepare.sh (text/train.jsonl; repeat for more) whose words count as "
                        "seen in the unseen-word table, e.g. that of the corpus the model was trained on "
                        "(prepare.sh --stop-stage 0 makes it in seconds) [DATA_DIR/text/train.jsonl]")
    add_search_options(p)
    return p


def first_texts(path: Path, n: int, prefix: str) -> List[dict]:
    """The first ``n`` utterances of a text split, under ids of their own (voices are drawn per id)."""
    if not path.is_file():
        raise SystemExit(f"{path} not found: --data-dir must be a synthetic corpus of prepare.sh (DATA_DIR/synth)")
    out = list(itertools.islice(read_utterances(path), n))
    for u in out:
        u["id"] = f"{prefix}-{u['id'].rsplit('-', 1)[-1]}"
    return out


def synthesize(split: str, texts: List[dict], voices: str, work: Path, seed: int) -> Path:
    """``local/synthesize.py`` on ``texts``; returns the cut manifest (recordings + supervisions)."""
    from lhotse import CutSet, load_manifest

    text = work / "text" / f"{split}.jsonl"
    text.parent.mkdir(parents=True, exist_ok=True)
    text.write_text("".join(json.dumps(u, ensure_ascii=True) + "\n" for u in texts))
    manifests = work / "manifests"
    cmd = [sys.executable, str(ROOT / "local/synthesize.py"), "--text", str(text), "--voices", voices,
           "--split", split, "--audio-dir", str(work / "audio" / split), "--manifest-dir", str(manifests),
           "--nj", "1", "--seed", str(seed)]
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"synthesis of {split} failed:\n{r.stderr[-3000:]}")
    cuts = CutSet.from_manifests(recordings=load_manifest(manifests / f"synth_recordings_{split}.jsonl.gz"),
                                 supervisions=load_manifest(manifests / f"synth_supervisions_{split}.jsonl.gz"))
    path = work / f"cuts_{split}.jsonl.gz"
    cuts.to_file(path)
    return path


def figures(s: Dict[str, dict]) -> Dict[str, float]:
    """The table's figures from :func:`zipformer_pc.runtime.utterances.score`'s summary per mode."""
    return {"utts": s["N"]["num_utts"], "wer": s["N"]["wer"], "pc_wer": s["P"]["pc_wer"], "per": s["P"]["per"]}


def training_words(paths: List[Path]) -> set:
    """The words (as WER counts them) of the N references of training texts of prepare.sh, made as the
    corpus makes them (``local/text_cuts.py``; a line that is not an utterance is named)."""
    words: set = set()
    for path in paths:
        if not path.is_file():
            raise SystemExit(f"--train-text {path} not found (prepare.sh --stop-stage 0 writes DATA_DIR/text/train.jsonl)")
        for utt in read_utterances(path):
            words.update(Views.of(reference_fields(utt["text_raw"], config=SYNTH_PUNCT)["text"]).np_nc)
    return words


def unseen_split(decoded, seen: set) -> Dict[str, float]:
    """N's errors of a cell split by whether the reference word is in ``seen``: the unseen words' share
    of the running words, each kind's error rate, and the WER points of each kind and of insertions."""
    n = {True: 0, False: 0}
    wrong = {True: 0, False: 0}
    inserted = 0
    for d in decoded:
        ref = Views.of(d.utt.ref_n or "").np_nc
        flags, k = word_errors(ref, Views.of(d.hyps.get("N", "")).np_nc)
        inserted += k
        for w, bad in zip(ref, flags):
            n[w in seen] += 1
            wrong[w in seen] += bad
    total = max(n[True] + n[False], 1)
    return {"words": n[True] + n[False], "unseen_pct": 100 * n[False] / total,
            "seen_wrong_pct": 100 * wrong[True] / max(n[True], 1),
            "unseen_wrong_pct": 100 * wrong[False] / max(n[False], 1),
            "seen_points": 100 * wrong[True] / total, "unseen_points": 100 * wrong[False] / total,
            "insertion_points": 100 * inserted / total}


def kokoro_missing() -> List[str]:
    """What the voices_kokoro cell needs and this machine lacks (``local/tts.py``, loaded from its file)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("tts", ROOT / "local" / "tts.py")
    tts = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tts)
    return tts.missing_tools(tts.KOKORO_OOD_VOICES)[0]


def main(argv=None) -> None:
    args = get_parser().parse_args(argv)
    setup_logging()
    cells = CELLS
    if args.kokoro != "false":
        missing = kokoro_missing()
        if not missing:
            cells = CELLS + (KOKORO_CELL,)
        elif args.kokoro == "true":
            raise SystemExit(f"--kokoro true: missing {', '.join(missing)} (tools/setup_env.sh installs them)")
        else:
            logging.info("no voices_kokoro cell: missing %s", ", ".join(missing))
    data = args.data_dir
    corpus = {"test": data / "fbank/synth_cuts_test.jsonl.gz", "test_ood": data / "fbank/synth_cuts_test_ood.jsonl.gz"}
    for path in corpus.values():
        if not path.is_file():
            raise SystemExit(f"{path} not found: run prepare.sh (stages 0-2) for --data-dir first")
    train_text = args.train_text or [data / "text/train.jsonl"]
    seen = training_words(train_text)
    tmp = None
    if args.work_dir is None:
        tmp = tempfile.TemporaryDirectory(prefix="ood_factors_")
        work = Path(tmp.name)
    else:
        work = args.work_dir
        work.mkdir(parents=True, exist_ok=True)
    try:
        t0 = time.time()
        corpus["voices_ood"] = synthesize("voices_ood", first_texts(data / "text/test.jsonl", args.num_utts, "voices_ood"),
                                          "ood", work, args.seed)
        corpus["text_ood"] = synthesize("text_ood", first_texts(data / "text/test_ood.jsonl", args.num_utts, "text_ood"),
                                        "train", work, args.seed)
        if KOKORO_CELL in cells:
            corpus["voices_kokoro"] = synthesize(
                "voices_kokoro", first_texts(data / "text/test.jsonl", args.num_utts, "voices_kokoro"),
                "kokoro_ood", work, args.seed)
        logging.info("synthesized %d x %d utterances in %.0f s", len(cells) - 2, args.num_utts, time.time() - t0)
        rec = StreamingRecognizer.from_dir(args.model_dir, args.int8, num_threads=args.num_threads,
                                           **search_kwargs(args, args.model_dir))
        outputs = add_derived(rec.transducer_type, {m: "" for m in rec.search_modes})
        if not {"N", "P"} <= set(outputs):
            raise SystemExit(f"{args.model_dir}: needs a model that writes both N and P, not {sorted(outputs)}")
        results, voices, unseen = {}, {}, {}
        for cell, _, _ in cells:
            t0 = time.time()
            decoded = utterances.decode(rec, utterances.from_cuts(corpus[cell], args.num_utts), 0.1).decoded
            results[cell] = figures(utterances.score(decoded))
            voices[cell] = {v: figures(s) for v, s in utterances.score_by_speaker(decoded).items()}
            unseen[cell] = unseen_split(decoded, seen)
            logging.info("%s: %d utterances decoded in %.0f s", cell, len(decoded), time.time() - t0)
    finally:
        if tmp is not None:
            tmp.cleanup()

    print(f"\n{args.model_dir}, {rec.decoding_method}, first {args.num_utts} utterances per cell\n")
    print("| cell | voices | text | utts | WER (N) | PC-WER | PER |")
    print("|---|---|---|---|---|---|---|")
    for cell, who, what in cells:
        s = results[cell]
        print(f"| {cell} | {who} | {what} | {s['utts']} | {fmt(s['wer'])} | {fmt(s['pc_wer'])} | {fmt(s['per'])} |")
    base = results["test"]["wer"]
    print(f"\nWER added by the text: {results['text_ood']['wer'] - base:+.2f}; by the voices: "
          f"{results['voices_ood']['wer'] - base:+.2f}; by both (test_ood): {results['test_ood']['wer'] - base:+.2f}"
          + (f"; by the Kokoro voices: {results['voices_kokoro']['wer'] - base:+.2f}" if "voices_kokoro" in results
             else ""))
    print("\n| cell | voice | utts | WER (N) | PC-WER | PER |")
    print("|---|---|---|---|---|---|")
    for cell, _, _ in cells:
        for v, s in voices[cell].items():
            print(f"| {cell} | {v} | {s['utts']} | {fmt(s['wer'])} | {fmt(s['pc_wer'])} | {fmt(s['per'])} |")
    print(f"\nN's errors on the words the training text never has ({', '.join(map(str, train_text))}: "
          f"{len(seen):,} distinct words)\n")
    print("| cell | running words | unseen | wrong: seen / unseen words | WER points: seen / unseen / insertions |")
    print("|---|---|---|---|---|")
    for cell, _, _ in cells:
        u = unseen[cell]
        print(f"| {cell} | {u['words']} | {u['unseen_pct']:.1f}% | {u['seen_wrong_pct']:.1f}% / "
              f"{u['unseen_wrong_pct']:.1f}% | {u['seen_points']:.2f} / {u['unseen_points']:.2f} / "
              f"{u['insertion_points']:.2f} |")
    if args.json:
        args.json.write_text(json.dumps({"model_dir": str(args.model_dir), "num_utts": args.num_utts,
                                         "cells": results, "voices": voices, "unseen_words": unseen,
                                         "train_text": [str(p) for p in train_text]}, indent=1) + "\n")


if __name__ == "__main__":
    main()
