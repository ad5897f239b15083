"""Score recognition output with every metric of the two papers.

Usage (``python -m zipformer_pc.score``, ``zpc-score`` and ``./scoring/score.py`` are the same command):
  # Human-readable report and the paper-style table row
  python -m zipformer_pc.score --ref scoring/examples/ref.txt --hyp scoring/examples/hyp.txt

  # One JSON object (keys: wer, wer_c, wer_p, pc_wer, wer_pc, punc_er,
  # case_er, per, per_marks, punct_matrix, counts, zero_wer_prf, ...)
  python -m zipformer_pc.score --ref scoring/examples/ref.txt --hyp scoring/examples/hyp.txt --json

  # Matched-pair significance test of system A (--hyp) against system B, and a
  # paired bootstrap of WER, PC-WER and PER (how often B is worse / better)
  python -m zipformer_pc.score --ref REF --hyp HYP_A --compare HYP_B

  # icefall files work too, and an icefall-style error file can be written
  python -m zipformer_pc.score --ref exp/recogs-test.txt --hyp exp/recogs-test.txt \
      --errs-file exp/errs-test.txt

  # The runtime's output (python -m zipformer_pc.transcribe --output) against a cut manifest's references
  python -m zipformer_pc.score --ref data/synth/fbank/synth_cuts_test.jsonl.gz --hyp out.txt --mode P

  # ... and a row per speaker (the manifest's; or --per-speaker data/utt2spk, Kaldi's layout)
  python -m zipformer_pc.score --ref data/synth/fbank/synth_cuts_test.jsonl.gz --hyp out.txt --mode P --per-speaker

REF and HYP hold ``utt_id<TAB>text`` lines (or icefall ``recogs-*.txt``
pairs, whose ``ref=`` / ``hyp=`` lines are used; or the runtime's
``utt_id<TAB>mode<TAB>text`` lines, of which ``--mode`` picks one mode); REF
can also be a lhotse cut manifest, whose ``--mode`` references are read
(zipformer_pc.transcripts).  Both sides are normalized
by zipformer_pc.text with the same punctuation config before scoring.
"""

import argparse
import json
import logging
import sys

from zipformer_pc.logs import setup_logging
from zipformer_pc.metrics import (
    compare_systems,
    markdown_header,
    markdown_row,
    paired_bootstrap,
    per_mark_table,
    score_corpus,
    score_groups,
    write_error_file,
)
from zipformer_pc.modes import MODE_IDS
from zipformer_pc.text import parse_punct_args
from zipformer_pc.transcripts import (
    TranscriptError,
    is_cut_manifest,
    pair_transcripts,
    read_groups,
    read_speakers,
    read_transcripts,
)


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--ref", required=True, help="Reference transcripts")
    p.add_argument("--hyp", required=True, help="Hypothesis transcripts (system A)")
    p.add_argument("--compare", default=None, help="Hypotheses of system B for a matched-pair test")
    p.add_argument("--json", action="store_true", help="Print one JSON object instead of a report")
    p.add_argument("--name", default=None, help="Row label in the markdown table (default: HYP path)")
    p.add_argument("--errs-file", default=None, help="Write an icefall-style per-utterance error file")
    p.add_argument(
        "--punct-keep", default=None, help="Marks kept in P, space separated (default: '. , ?')"
    )
    p.add_argument(
        "--punct-map", default=None, help="Marks mapped to kept ones, e.g. '!>. ;>,' (default: none)"
    )
    p.add_argument("--mode", choices=list(MODE_IDS), default=None,
                   help="the output mode to score: the lines of that mode in the runtime's "
                        "'id<TAB>mode<TAB>text' output and that reference of a cut manifest (needed for those)")
    p.add_argument("--per-speaker", nargs="?", const="", default=None, metavar="UTT2SPK",
                   help="also score each speaker's utterances: the speakers of the --ref cut manifest, "
                        "or of a Kaldi utt2spk file given here")
    p.add_argument("--per-group", default=None, metavar="FIELDS",
                   help="also score each group of utterances of the --ref cut manifest, a group being the values of "
                        "these comma-separated fields (speaker, or keys of the supervisions' custom): e.g. "
                        "source,kind for test_real (asterisk/sentence, asterisk/word, alsa/phrase)")
    p.add_argument("--significance-level", type=float, default=0.05)
    p.add_argument("--bootstrap-resamples", type=int, default=1000,
                   help="resamples of the paired bootstrap with --compare [1000]")
    p.add_argument("--seed", type=int, default=0, help="seed of the paired bootstrap [0]")
    return p


def main(argv=None) -> int:
    setup_logging()
    args = get_parser().parse_args(argv)
    try:
        config = parse_punct_args(args.punct_keep, args.punct_map)
        refs = read_transcripts(args.ref, "ref", args.mode)
        hyps = read_transcripts(args.hyp, "hyp", args.mode)
    except (TranscriptError, ValueError, OSError) as e:
        logging.error(str(e))
        return 2
    if not refs:
        logging.error(f"No reference utterances in {args.ref}")
        return 2
    pairing = pair_transcripts(refs, hyps)
    score = score_corpus(pairing.triples, config)
    summ = score.summary()
    summ["missing_hyp"] = len(pairing.missing_hyp)
    summ["extra_hyp"] = len(pairing.extra_hyp)
    if args.per_speaker == "" and not is_cut_manifest(args.ref):
        logging.error(f"--per-speaker alone reads the speakers of a cut manifest, and --ref {args.ref} is not one: "
                      "give a Kaldi utt2spk file (--per-speaker UTT2SPK)")
        return 2
    if args.per_speaker is not None:
        try:
            summ["speakers"] = score_by_speaker(pairing.triples, args.per_speaker or args.ref, config)
        except (TranscriptError, ValueError, OSError) as e:
            logging.error(str(e))
            return 2
    if args.per_group:
        try:
            summ["groups"] = score_by_group(pairing.triples, args.ref, args.per_group.split(","), config)
        except (TranscriptError, ValueError, OSError) as e:
            logging.error(str(e))
            return 2
    name = args.name or args.hyp

    sig = None
    if args.compare:
        try:
            hyps_b = read_transcripts(args.compare, "hyp", args.mode)
        except (TranscriptError, ValueError, OSError) as e:
            logging.error(str(e))
            return 2
        score_b = score_corpus(pair_transcripts(refs, hyps_b).triples, config)
        sig = compare_systems(score, score_b, args.significance_level)
        try:
            boot = paired_bootstrap(score, score_b, resamples=args.bootstrap_resamples, seed=args.seed)
        except ValueError as e:
            logging.error(str(e))
            return 2
        summ["significance"] = {"a": args.hyp, "b": args.compare, "tests": sig, "bootstrap": boot}
        summ_b = score_b.summary()

    if args.errs_file:
        write_error_file(args.errs_file, pairing.triples, score)
        logging.info(f"Wrote {args.errs_file}")

    if args.json:
        json.dump(summ, sys.stdout, allow_nan=False)
        sys.stdout.write("\n")
        return 0

    c = summ["counts"]
    q = summ["zero_wer_prf"]
    print(f"Scored {summ['num_utts']} utterances ({config.describe()})")
    print(f"  {c['N_np_nc']} reference words, {c['N_p']} marks, {c['N_c']} cased words")
    print()
    print(markdown_header())
    print(markdown_row(name, summ))
    if sig is not None:
        print(markdown_row(args.compare, summ_b))
    for key, title, first in (("speakers", "speaker", "speaker"),
                              ("groups", (args.per_group or "").replace(",", "/"), "group")):
        if key in summ:
            print()
            print(f"Per {title} ({len(summ[key])}):")
            print(markdown_header(f"{first} (utterances)"))
            for g, s in summ[key].items():
                print(markdown_row(f"{g} ({s['num_utts']})", s))
    print()
    print("Punctuation (LibriSpeech-PC PER, %):")
    print(per_mark_table(summ))
    print()
    print(
        f"On the {q['num_zero_wer_utts']} of {q['num_utts']} utterances with WER = 0: "
        f"capitalization F1 {_f(q['capitalization']['f1'])} "
        f"(P {_f(q['capitalization']['precision'])}, R {_f(q['capitalization']['recall'])}), "
        f"punctuation F1 {_f(q['punctuation']['f1'])} "
        f"(P {_f(q['punctuation']['precision'])}, R {_f(q['punctuation']['recall'])})"
    )
    if sig is not None:
        print()
        print(f"Matched-pair test (MAPSSWE, per utterance), A={args.hyp} B={args.compare}:")
        for metric, r in sig.items():
            verdict = f"{r['better']} better" if r["significant"] else "no significant difference"
            w = "undefined" if r["w"] is None else f"{r['w']:+.3f}"
            print(f"  {metric:8s} W={w} p={r['p_value']:.4f}  {verdict}")
        print(f"Paired bootstrap ({args.bootstrap_resamples} resamples of the utterances, seed {args.seed}): "
              "how often B is worse / better than A")
        for metric, r in summ["significance"]["bootstrap"].items():
            if r["p_b_worse"] is None:
                print(f"  {metric:8s} undefined (no resample has a denominator)")
            else:
                print(f"  {metric:8s} A {_f(r['a'])}  B {_f(r['b'])}  B worse {r['p_b_worse']:.3f}  "
                      f"B better {r['p_b_better']:.3f}")
    return 0


def score_by_speaker(triples, speakers_path: str, config) -> dict:
    """``{speaker: summary}`` (speakers sorted) of the scored triples, speakers read from ``speakers_path``.

    Every scored utterance needs a speaker: the ones without are an error
    that names them, not a row of their own.
    """
    try:
        return score_groups(triples, read_speakers(speakers_path), config)
    except ValueError as e:
        raise TranscriptError(f"{speakers_path}: {str(e).replace('no group', 'no speaker', 1)}") from None


def score_by_group(triples, cuts_path: str, fields, config) -> dict:
    """``{group: summary}`` (groups sorted) of the scored triples, the groups read from the cut
    manifest's ``fields`` (zipformer_pc.transcripts.read_groups)."""
    try:
        return score_groups(triples, read_groups(cuts_path, [f.strip() for f in fields if f.strip()]), config)
    except ValueError as e:
        raise TranscriptError(f"{cuts_path}: {e}") from None


def _f(x) -> str:
    return "-" if x is None else f"{x:.2f}"


if __name__ == "__main__":
    sys.exit(main())
