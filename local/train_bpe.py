#!/usr/bin/env python3
"""Train the one sentencepiece tokenizer on P and N training text together.

Usage:
  ./local/train_bpe.py --cuts data/synth/fbank/synth_cuts_train.jsonl.gz \
      --lang-dir data/synth/lang_bpe_256 --vocab-size 256

Writes ``bpe.model``, ``tokens.txt`` (``piece id`` lines, icefall style) and
``transcript_words.txt`` (the training text) to ``--lang-dir``.  Ids:
``<blk>`` = 0 (the transducer blank), ``<sos/eos>`` = 1, ``<unk>`` = 2.
The model is case-sensitive and splits punctuation into its own pieces; the
script fails if a kept punctuation mark or a capital letter cannot be
encoded without ``<unk>``.

With ``--bpe-model FILE`` no tokenizer is trained: FILE (e.g. the shipped
``egs/synth/pretrained/bpe.model``, so that fine-tuning from the shipped
models keeps their token ids) is copied and checked the same way.
"""

import argparse
import logging
import shutil
from pathlib import Path

from zipformer_pc.data.references import get_n, get_p
from zipformer_pc.logs import setup_logging


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cuts", required=True, nargs="+", help="Training cut manifests")
    p.add_argument("--lang-dir", required=True)
    p.add_argument("--vocab-size", type=int, default=500)
    p.add_argument("--model-type", default="unigram", choices=["unigram", "bpe"])
    p.add_argument("--bpe-model", default=None,
                   help="Use this trained sentencepiece model instead of training one (--vocab-size is then its size)")
    return p


def main() -> None:
    setup_logging()
    args = get_parser().parse_args()
    import sentencepiece as spm
    from lhotse import load_manifest_lazy

    lang_dir = Path(args.lang_dir)
    lang_dir.mkdir(parents=True, exist_ok=True)
    text_path = lang_dir / "transcript_words.txt"
    n_p = n_n = 0
    marks = set()
    with open(text_path, "w", encoding="utf-8") as f:
        for path in args.cuts:
            for cut in load_manifest_lazy(path):
                for sup in cut.supervisions:
                    f.write(get_n(sup) + "\n")
                    n_n += 1
                    p = get_p(sup)
                    if p:
                        f.write(p + "\n")
                        n_p += 1
                        marks.update(ch for ch in p if ch in ".,?!;:")
        # Every ASCII letter and digit once, so rare capitals never become <unk>.
        f.write(" ".join("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789") + "\n")
    logging.info(f"Training text: {n_n} N lines and {n_p} P lines; marks seen: {' '.join(sorted(marks))}")
    prefix = lang_dir / "bpe"
    if args.bpe_model:
        if not Path(args.bpe_model).is_file():
            raise SystemExit(f"--bpe-model {args.bpe_model} does not exist")
        shutil.copyfile(args.bpe_model, str(prefix) + ".model")
        logging.info(f"Using the tokenizer {args.bpe_model} (not training one)")
    else:
        train(text_path, prefix, args)
    sp = spm.SentencePieceProcessor(model_file=str(prefix) + ".model")
    if sp.piece_to_id("<blk>") != 0 or sp.piece_to_id("<sos/eos>") != 1 or sp.unk_id() != 2:
        raise SystemExit(f"{prefix}.model does not have <blk> = 0, <sos/eos> = 1, <unk> = 2")
    with open(lang_dir / "tokens.txt", "w", encoding="utf-8") as f:
        for i in range(sp.get_piece_size()):
            f.write(f"{sp.id_to_piece(i)} {i}\n")
    probe = "Is it Quixote, XYZ? Yes, it is. " + " ".join(sorted(marks))
    ids = sp.encode(probe)
    if sp.unk_id() in ids:
        raise SystemExit(f"The tokenizer maps part of {probe!r} to <unk>: {sp.encode(probe, out_type=str)}")
    logging.info(f"Wrote {prefix}.model and {lang_dir / 'tokens.txt'} ({sp.get_piece_size()} pieces)")


def train(text_path: Path, prefix: Path, args) -> None:
    import sentencepiece as spm

    spm.SentencePieceTrainer.train(
        input=str(text_path),
        model_prefix=str(prefix),
        model_type=args.model_type,
        vocab_size=args.vocab_size,
        character_coverage=1.0,
        input_sentence_size=10_000_000,
        user_defined_symbols=["<blk>", "<sos/eos>"],
        unk_id=2,
        bos_id=-1,
        eos_id=-1,
        split_by_unicode_script=True,
        split_digits=True,
        num_threads=1,  # deterministic output
        minloglevel=2,
    )


if __name__ == "__main__":
    main()
