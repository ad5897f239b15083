#!/usr/bin/env python3
"""A cut manifest of a synthetic corpus's text alone: its references, no speech.

Usage:
  ./local/text_cuts.py --text data/synth/text/train.jsonl --out exp/text/synth_cuts_train.jsonl.gz \
      --held-out data/synth/fbank/synth_cuts_{dev,test,test_ood}.jsonl.gz

Each utterance of ``--text`` (``local/prepare_synth_text.py``'s output)
becomes a cut without audio or features whose supervision carries the N and
P references exactly as the corpus's own manifests do
(``zipformer_pc.data.references.reference_fields`` with the synthetic
corpus's punctuation), its duration the voices' estimated reading time.
The text models train on such a manifest as on the corpus's
(``local/train_lm.py``, ``local/train_questions.py``): ``pretrain.sh
--text-hours`` uses it to train them on all the training text of a corpus
without synthesizing that corpus.  ``--held-out`` names the manifests the
models will be measured on: when one of their texts is among ``--text``'s
(a text corpus made with another seed or other dev and test sizes than the
corpus it serves), nothing is written and the script says so, since text
models that have read the test text make its figures meaningless.
"""

import argparse
import logging
from pathlib import Path

from prepare_synth_text import WORDS_PER_SECOND  # this script's sibling (its folder is on sys.path when run)

from zipformer_pc.data.references import SYNTH_PUNCT, reference_fields
from zipformer_pc.data.utterances import read_utterances
from zipformer_pc.logs import setup_logging


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--text", type=Path, required=True, help="a split's text (JSON lines of prepare_synth_text.py)")
    p.add_argument("--out", type=Path, required=True, help="the cut manifest to write (.jsonl.gz)")
    p.add_argument("--held-out", nargs="*", default=[],
                   help="cut manifests (dev, test) whose texts must not be in --text")
    return p


def held_out_texts(paths):
    """The source texts (``text_raw``, else P, else N) of the supervisions of ``paths``."""
    from lhotse import load_manifest_lazy

    from zipformer_pc.data.references import get_n, get_p, get_raw

    out = set()
    for path in paths:
        if not Path(path).is_file():
            raise SystemExit(f"--held-out {path}: no such file")
        for cut in load_manifest_lazy(path):
            for sup in cut.supervisions:
                out.add(get_raw(sup) or get_p(sup) or get_n(sup))
    return out


def text_cut(utt: dict):
    from lhotse import MonoCut, SupervisionSegment

    fields = reference_fields(utt["text_raw"], config=SYNTH_PUNCT)
    duration = round(max(1, len(fields["text"].split())) / WORDS_PER_SECOND, 2)
    sup = SupervisionSegment(id=utt["id"], recording_id=utt["id"], start=0, duration=duration, text=fields["text"],
                             custom=fields["custom"] or None)
    return MonoCut(id=utt["id"], start=0, duration=duration, channel=0, supervisions=[sup])


def main(argv=None) -> None:
    setup_logging()
    args = get_parser().parse_args(argv)
    if not args.text.is_file():
        raise SystemExit(f"{args.text}: no such file (prepare.sh --stop-stage 0 writes the text)")
    from lhotse import CutSet

    utts = list(read_utterances(args.text))
    if not utts:
        raise SystemExit(f"{args.text}: no utterances")
    held = held_out_texts(args.held_out)
    leaked = [u["id"] for u in utts if u["text_raw"] in held]
    if leaked:
        raise SystemExit(f"{len(leaked)} utterances of {args.text} (e.g. {leaked[0]}) are texts of --held-out "
                         f"{' '.join(args.held_out)}: make the text with the seed, dev and test sizes of that corpus")
    cuts = [text_cut(u) for u in utts]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    CutSet.from_cuts(cuts).to_file(args.out)
    logging.info("%d utterances, %.1f h (estimated) -> %s", len(cuts), sum(c.duration for c in cuts) / 3600, args.out)


if __name__ == "__main__":
    main()
