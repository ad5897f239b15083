#!/usr/bin/env python3
"""Train the question model that turns the ``.`` of question sentences into ``?`` in P output.

Usage:
  ./local/train_questions.py --cuts data/synth/fbank/synth_cuts_train.jsonl.gz \
      --dev-cuts data/synth/fbank/synth_cuts_dev.jsonl.gz --out exp/onnx/questions.json.gz

Reads the sentences of the training P references that end with ``.`` or
``?`` (each utterance once: speed-perturbed copies are skipped), fits the
logistic regression of ``zipformer_pc.questions`` and sets its threshold
to the one with the fewest wrong marks on the dev references' sentences
(0.5 without ``--dev-cuts``).  Put ``questions.json.gz`` beside an ONNX
export and the runtime applies it to P (``python -m zipformer_pc.transcribe
--questions``); ``python -m zipformer_pc.decoding.decode --questions FILE``
does the same.  As for the token LMs, only training references belong in
``--cuts``: a model that has read the test text makes the test figures
meaningless.
"""

import argparse
import logging
import time
from pathlib import Path

from zipformer_pc.data.references import SupervisionsOnce, get_p
from zipformer_pc.logs import setup_logging
from zipformer_pc.questions import decision_counts, sentences, train, tune_threshold


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cuts", required=True, nargs="+", help="training cut manifests (their P references)")
    p.add_argument("--dev-cuts", nargs="*", default=[], help="cut manifests whose P references set the threshold")
    p.add_argument("--out", type=Path, required=True, help="the model file (questions.json.gz)")
    p.add_argument("--epochs", type=int, default=30, help="passes over the training sentences")
    p.add_argument("--l2", type=float, default=1e-2, help="L2 weight of the logistic regression")
    p.add_argument("--seed", type=int, default=42)
    return p


def read_sentences(paths):
    sups = SupervisionsOnce(paths)
    out, without_p = [], 0
    for sup in sups:
        text = get_p(sup)
        if text is None:
            without_p += 1
            continue
        out.extend(sentences(text))
    return out, sups, without_p


def main(argv=None) -> None:
    setup_logging()
    args = get_parser().parse_args(argv)
    if args.epochs < 1:
        raise SystemExit(f"--epochs must be at least 1, got {args.epochs}")
    if args.l2 < 0:
        raise SystemExit(f"--l2 must be at least 0, got {args.l2}")
    t0 = time.time()
    examples, sups, without_p = read_sentences(args.cuts)
    questions = sum(1 for _, m in examples if m == "?")
    logging.info("Training text: %d utterances (%d without a P reference, %d speed-perturbed copies skipped), "
                 "%d sentences, %d of them questions", sups.cuts, without_p, sups.copies, len(examples), questions)
    if not examples:
        raise SystemExit(f"no sentence ending with . or ? in the P references of {' '.join(args.cuts)}")
    if questions == 0:
        raise SystemExit("the training references have no question (?): nothing to learn")
    model = train(examples, epochs=args.epochs, l2=args.l2, seed=args.seed)
    dev, _, _ = read_sentences(args.dev_cuts) if args.dev_cuts else ([], None, 0)
    model.threshold = tune_threshold(model, dev)
    model.info.update(seed=args.seed, epochs=args.epochs, l2=args.l2, dev_sentences=len(dev))
    if dev:
        c = decision_counts(model, dev)
        model.info["dev"] = c
        logging.info("Dev: %d sentences, %d questions; threshold %.2f: %d found, %d missed, %d statements "
                     "taken for questions", len(dev), c["tp"] + c["fn"], model.threshold, c["tp"], c["fn"], c["fp"])
    else:
        logging.info("No --dev-cuts: threshold 0.5")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    model.save(args.out)
    logging.info("%d features, %.0f kB -> %s (%.0f s)", len(model.weights), args.out.stat().st_size / 1e3,
                 args.out, time.time() - t0)


if __name__ == "__main__":
    main()
