"""Streaming recognition of wav files or a cut manifest with the ONNX runtime: both transcripts, RTF.

Usage:
  # wav files and/or folders of wavs; prints both transcripts and the RTF
  python -m zipformer_pc.transcribe --model-dir egs/synth/exp/conditioned/onnx a.wav wavs/
  # long recordings: segments cut by endpoint rules, word times as JSON lines
  python -m zipformer_pc.transcribe --model-dir DIR --endpoint true --timestamps true talk.wav
  # subtitles: talk.srt next to talk.wav (vtt: WebVTT; json: segments, words and times of both modes)
  python -m zipformer_pc.transcribe --model-dir DIR --format srt talk.wav
  # ... of several inputs: one <id>.vtt per input in the folder subs/
  python -m zipformer_pc.transcribe --model-dir DIR --format vtt --output subs/ a.wav b.wav
  # numbers as digits in P ("twenty five dollars" -> "$25"); N stays spoken
  python -m zipformer_pc.transcribe --model-dir DIR --itn true a.wav
  # a lhotse cut manifest, scored against its P and N references
  python -m zipformer_pc.transcribe --model-dir DIR --cuts data/synth/fbank/synth_cuts_test.jsonl.gz --int8 true
  # ... and the metrics per speaker (voice), also in the JSON
  python -m zipformer_pc.transcribe --model-dir DIR --cuts CUTS --per-speaker true --scores-json scores.json
  # modified beam search (4 paths) instead of greedy search
  python -m zipformer_pc.transcribe --model-dir DIR --decoding-method modified_beam_search --beam-size 4 a.wav
  # P as searched: no question model (questions.json.gz of the model dir) turning . into ?
  python -m zipformer_pc.transcribe --model-dir DIR --questions false a.wav
  # favour the phrases of a list (one a line, cased as P writes them; 'Queequeg :2.5': its own bonus)
  python -m zipformer_pc.transcribe --model-dir DIR --decoding-method modified_beam_search --hotwords names.txt a.wav

(``zpc-transcribe`` is the same command once the package is installed; ``--modes`` takes a comma
list of P and N, or all: zipformer_pc.options.)
Needs only onnxruntime, numpy and kaldi-native-fbank; ``--cuts`` also needs
lhotse, and scoring ``zipformer_pc.metrics``.  Each utterance is fed in
pieces of ``--piece-seconds`` to :class:`zipformer_pc.runtime.StreamingRecognizer`
(:func:`zipformer_pc.runtime.utterances.decode`).
"""

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Dict

from zipformer_pc.logs import setup_logging
from zipformer_pc.metrics import fmt
from zipformer_pc.options import add_modes_option, str2bool
from zipformer_pc.runtime import subtitles, utterances
from zipformer_pc.runtime.audio import wav_files
from zipformer_pc.runtime.endpoint import EndpointConfig, add_endpoint_options
from zipformer_pc.runtime.recognizer import StreamingRecognizer, add_search_options, search_kwargs


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("inputs", nargs="*", help="wav files or folders of wav files")
    p.add_argument("--model-dir", type=Path, required=True, help="an export of python -m zipformer_pc.export")
    p.add_argument("--int8", type=str2bool, default=False)
    p.add_argument("--cuts", default=None, help="a lhotse cut manifest to decode and score (needs lhotse)")
    p.add_argument("--num-threads", type=int, default=1, help="encoder intra-op threads")
    p.add_argument("--piece-seconds", type=float, default=0.1, help="audio fed per accept_waveform call")
    add_modes_option(p, "searched (those exported)")
    add_search_options(p)
    p.add_argument("--itn", type=str2bool, default=False,
                   help="P with numbers as digits: '$25', 'the 3rd of May', '1999', '10:30 a.m.' "
                        "(zipformer_pc/itn.py; word times follow); N stays spoken")
    p.add_argument("--max-utts", type=int, default=0, help="decode at most this many (0: all)")
    p.add_argument("--format", choices=subtitles.FORMATS, default="tsv",
                   help="tsv: --output gets 'id<TAB>mode<TAB>text' lines; srt / vtt: subtitles (P, or N when P is not "
                        "searched) from the endpointed segments and word times; json: per input its segments with "
                        "the words and times of both modes. srt, vtt and json write one file per input: next to its "
                        "wav (a.wav -> a.srt) without --output, in the folder --output with several inputs or when "
                        "--output is a folder, else the file --output")
    p.add_argument("--output", default=None,
                   help="tsv: write 'id<TAB>mode<TAB>text' lines here; srt, vtt, json: the file or folder (see --format)")
    p.add_argument("--max-line-chars", type=int, default=subtitles.DEFAULT_MAX_LINE_CHARS,
                   help="srt, vtt: characters per line of a cue at most (2 lines)")
    p.add_argument("--max-cue-seconds", type=float, default=subtitles.DEFAULT_MAX_CUE_SECONDS,
                   help="srt, vtt: seconds a cue lasts at most")
    p.add_argument("--per-speaker", type=str2bool, default=False,
                   help="with --cuts: also print (and put in --scores-json) the metrics per speaker")
    p.add_argument("--scores-json", type=Path, default=None,
                   help="with --cuts: write the metrics per mode, the RTF and the search settings as JSON here")
    add_endpoint_options(p, False, "each input (default: true for --format srt, vtt and json, false for tsv)")
    p.set_defaults(endpoint=None)  # resolved by main() from --format
    p.add_argument("--timestamps", type=str2bool, default=False,
                   help="print one JSON line per segment with word and token times (both modes)")
    return p


def speaker_table(by_speaker: Dict[str, Dict[str, Dict[str, float]]]) -> str:
    """A markdown table of WER (N), PC-WER and PER (P) per speaker."""
    lines = ["| speaker | utts | WER (N) | PC-WER | PER |", "|---|---|---|---|---|"]
    for spk, s in by_speaker.items():
        n, p = s.get("N", {}), s.get("P", {})
        utts = n.get("num_utts", p.get("num_utts", 0))
        lines.append(f"| {spk} | {utts} | {fmt(n.get('wer'))} | {fmt(p.get('pc_wer'))} | {fmt(p.get('per'))} |")
    return "\n".join(lines)


def output_files(fmt: str, utts, output) -> Dict[str, Path]:
    """Each input's srt / vtt / json file (:func:`zipformer_pc.runtime.subtitles.output_paths`)."""
    paths = subtitles.output_paths([u.uid for u in utts], [u.path for u in utts], output, fmt)
    return {u.uid: p for u, p in zip(utts, paths)}


def main(argv=None) -> None:
    args = get_parser().parse_args(argv)
    setup_logging()
    if not args.inputs and not args.cuts:
        sys.exit("give wav files / folders or --cuts")
    if (args.scores_json or args.per_speaker) and not args.cuts:
        sys.exit("--scores-json and --per-speaker need --cuts (references to score against)")
    if args.max_line_chars < 1 or args.max_cue_seconds <= 0:
        sys.exit("error: --max-line-chars must be at least 1 and --max-cue-seconds above 0")
    if args.endpoint is None:  # subtitles and JSON documents are made of the endpointed segments
        args.endpoint = args.format != "tsv"
    modes = list(args.modes) if args.modes else None  # None: every mode exported
    try:
        utts = utterances.from_wavs(wav_files(args.inputs))
        if args.format != "tsv" and not args.cuts:  # before the model loads: a clear error at once
            files = output_files(args.format, utts[: args.max_utts] if args.max_utts > 0 else utts, args.output)
    except (FileNotFoundError, ValueError) as e:
        sys.exit(f"error: {e}")
    endpoint = EndpointConfig.from_args(args)
    try:
        search_args = search_kwargs(args, args.model_dir)  # reads --hotwords
    except (ValueError, OSError) as e:
        sys.exit(f"error: {e}")
    try:
        rec = StreamingRecognizer.from_dir(args.model_dir, args.int8, num_threads=args.num_threads, modes=modes,
                                           endpoint=endpoint, itn=args.itn, **search_args)
    except ValueError as e:  # e.g. a hotword the model's tokens cannot write
        sys.exit(f"error: {e}")
    if args.cuts:
        utts += utterances.from_cuts(args.cuts)
        if args.itn:
            logging.warning("--itn true: P is scored with its numbers as digits against references that spell them")
    if args.max_utts > 0:
        utts = utts[: args.max_utts]
    if args.format != "tsv" and args.cuts:
        try:
            files = output_files(args.format, utts, args.output)
        except ValueError as e:
            sys.exit(f"error: {e}")

    def show(d: utterances.Decoded) -> None:
        if args.timestamps or (args.endpoint and args.format == "tsv"):
            for seg in d.segments:
                print(json.dumps({"id": d.utt.uid, **seg.as_dict(args.timestamps)}, ensure_ascii=False), flush=True)
        else:
            print(f"{d.utt.uid}\t" + "\t".join(f"{m}: {d.hyps[m]}" for m in sorted(d.hyps, reverse=True)), flush=True)
        if args.format != "tsv":
            path = files[d.utt.uid]
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(subtitles.render(args.format, d.utt.uid, d.duration, d.segments, d.hyps,
                                             max_line_chars=args.max_line_chars, max_cue_seconds=args.max_cue_seconds),
                            encoding="utf-8")
            logging.info("%s: wrote %s", d.utt.uid, path)

    run = utterances.decode(rec, utts, args.piece_seconds, on_decoded=show)
    rtf = run.rtf
    logging.info("Decoded %d utterances (%.1f s of audio, %d skipped) in %.1f s: RTF %.3f with %d encoder thread(s)",
                 len(run.decoded), run.audio_seconds, run.skipped, run.wall_seconds, rtf, args.num_threads)
    print(f"RTF {rtf:.4f} ({len(run.decoded)} utterances, {run.audio_seconds:.1f} s audio, {args.num_threads} thread(s))")
    if args.output and args.format == "tsv":
        utterances.write_hyps(args.output, run.decoded)
    if utts and not run.decoded:
        sys.exit(f"error: none of the {len(utts)} input(s) could be decoded (see the warnings above)")
    if args.cuts:
        scores = utterances.score(run.decoded)
        for mode, summary in scores.items():
            keys = ["wer"] if mode == "N" else ["wer", "punc_er", "case_er", "pc_wer"]
            print(f"{mode}: " + ", ".join(f"{k} {summary.get(k)}" for k in keys))
        by_speaker = utterances.score_by_speaker(run.decoded) if args.per_speaker else None
        if by_speaker:
            print(speaker_table(by_speaker))
        if args.scores_json:
            search = {"decoding_method": rec.decoding_method, "int8": args.int8,
                      "lms": sorted(rec.lms), "num_threads": args.num_threads,
                      "questions": rec.questions is not None, "blank_penalty": rec.blank_penalty, "itn": rec.itn}
            if rec.decoding_method == "modified_beam_search":
                search.update(beam=rec.beam, lm_scale=rec.lm_scale,
                              lm_token_bonus=rec.lm_token_bonus if rec.lms else None,
                              lodr_scale=rec.lodr_scale if rec.lms else None)
                if args.hotwords is not None:
                    search.update(hotwords=str(args.hotwords), hotwords_score=args.hotwords_score)
            out = {"cuts": str(args.cuts), "utterances": len(run.decoded), "rtf": rtf, "search": search,
                   "scores": scores}
            if by_speaker:
                out["speakers"] = by_speaker
            args.scores_json.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
