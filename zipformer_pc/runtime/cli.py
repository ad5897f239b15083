"""Streaming recognition of wav files or a cut manifest with the ONNX runtime: both transcripts, RTF.

Usage:
  # wav files and/or folders of wavs; prints both transcripts and the RTF
  python export/onnx_streaming.py --model-dir egs/synth/exp/conditioned/onnx a.wav wavs/
  # long recordings: segments cut by endpoint rules, word times as JSON lines
  python export/onnx_streaming.py --model-dir DIR --endpoint true --timestamps true talk.wav
  # a lhotse cut manifest, scored against its P and N references
  python export/onnx_streaming.py --model-dir DIR --cuts data/synth/fbank/synth_cuts_test.jsonl.gz --int8 true
  # modified beam search (4 paths) instead of greedy search
  python export/onnx_streaming.py --model-dir DIR --decoding-method modified_beam_search --beam-size 4 a.wav

(``zpc-transcribe`` is the same command once the package is installed.)
Needs only onnxruntime, numpy and kaldi-native-fbank; ``--cuts`` also needs
lhotse, and scoring ``zipformer_pc.metrics``.  Each utterance is fed in
pieces of ``--piece-seconds`` to :class:`zipformer_pc.runtime.StreamingRecognizer`.
"""

import argparse
import json
import logging
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import numpy as np

from zipformer_pc.runtime.audio import read_wav, wav_files
from zipformer_pc.options import str2bool
from zipformer_pc.runtime.endpoint import EndpointConfig, add_endpoint_options
from zipformer_pc.runtime.recognizer import StreamingRecognizer, add_search_options, search_kwargs


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("inputs", nargs="*", help="wav files or folders of wav files")
    p.add_argument("--model-dir", type=Path, required=True, help="output of export/export_onnx.py")
    p.add_argument("--int8", type=str2bool, default=False)
    p.add_argument("--cuts", default=None, help="a lhotse cut manifest to decode and score (needs lhotse)")
    p.add_argument("--num-threads", type=int, default=1, help="encoder intra-op threads")
    p.add_argument("--piece-seconds", type=float, default=0.1, help="audio fed per accept_waveform call")
    p.add_argument("--modes", default="", help="comma list of P,N (default: all exported)")
    add_search_options(p)
    p.add_argument("--max-utts", type=int, default=0, help="decode at most this many (0: all)")
    p.add_argument("--output", type=Path, default=None, help="write 'id<TAB>mode<TAB>text' lines here")
    p.add_argument("--scores-json", type=Path, default=None,
                   help="with --cuts: write the metrics per mode, the RTF and the search settings as JSON here")
    add_endpoint_options(p, False, "each input")
    p.add_argument("--timestamps", type=str2bool, default=False,
                   help="print one JSON line per segment with word and token times (both modes)")
    return p


def main(argv=None) -> None:
    args = get_parser().parse_args(argv)
    logging.basicConfig(format="%(asctime)s %(levelname)s %(message)s", level=logging.INFO)
    if not args.inputs and not args.cuts:
        sys.exit("give wav files / folders or --cuts")
    if args.scores_json and not args.cuts:
        sys.exit("--scores-json needs --cuts (references to score against)")
    modes = [m for m in args.modes.split(",") if m] or None
    endpoint = EndpointConfig.from_args(args)
    rec = StreamingRecognizer.from_dir(args.model_dir, args.int8, num_threads=args.num_threads, modes=modes,
                                       endpoint=endpoint, **search_kwargs(args, args.model_dir))
    items: List[Tuple[str, object]] = [(w.stem, w) for w in wav_files(args.inputs)]
    refs: Dict[str, Tuple[str, Optional[str]]] = {}
    if args.cuts:
        from lhotse import load_manifest_lazy

        for cut in load_manifest_lazy(args.cuts):
            items.append((cut.id, cut))
            sup = cut.supervisions[0] if cut.supervisions else None
            if sup is not None:
                refs[cut.id] = (sup.text or "", (sup.custom or {}).get("text_p"))
    if args.max_utts > 0:
        items = items[: args.max_utts]
    hyps: Dict[str, Dict[str, str]] = {}
    audio_seconds = wall = 0.0
    skipped = 0
    for n, (uid, src) in enumerate(items, 1):
        try:
            if isinstance(src, Path):
                samples, rate = read_wav(str(src))
            else:
                samples, rate = src.load_audio()[0].astype(np.float32), int(src.sampling_rate)
        except (ValueError, OSError) as e:
            skipped += 1
            logging.warning("skipping %s: %s", uid, e)
            continue
        t0 = time.perf_counter()
        segments = rec.recognize_segments(samples, rate, args.piece_seconds)
        wall += time.perf_counter() - t0
        audio_seconds += len(samples) / rate
        res = rec.transcript(segments)
        hyps[uid] = res
        if args.timestamps or args.endpoint:
            for seg in segments:
                print(json.dumps({"id": uid, **seg.as_dict(args.timestamps)}, ensure_ascii=False), flush=True)
        else:
            print(f"{uid}\t" + "\t".join(f"{m}: {res[m]}" for m in sorted(res, reverse=True)), flush=True)
        if n % 50 == 0:
            logging.info("%d/%d utterances, RTF so far %.3f", n, len(items), wall / max(audio_seconds, 1e-9))
    rtf = wall / max(audio_seconds, 1e-9)
    logging.info("Decoded %d utterances (%.1f s of audio, %d skipped) in %.1f s: RTF %.3f with %d encoder thread(s)",
                 len(hyps), audio_seconds, skipped, wall, rtf, args.num_threads)
    print(f"RTF {rtf:.4f} ({len(hyps)} utterances, {audio_seconds:.1f} s audio, {args.num_threads} thread(s))")
    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            for uid, res in hyps.items():
                for m, text in res.items():
                    f.write(f"{uid}\t{m}\t{text}\n")
    if refs:
        from zipformer_pc.metrics import score_corpus

        scores = {}
        for mode in ("N", "P"):
            pairs = [(uid, refs[uid][1] if mode == "P" else refs[uid][0], h[mode]) for uid, h in hyps.items()
                     if mode in h and uid in refs and (mode == "N" or refs[uid][1] is not None)]
            if pairs:
                summary = scores[mode] = score_corpus(pairs).summary()
                keys = ["wer"] if mode == "N" else ["wer", "punc_er", "case_er", "pc_wer"]
                print(f"{mode}: " + ", ".join(f"{k} {summary.get(k)}" for k in keys))
        if args.scores_json:
            search = {"decoding_method": rec.decoding_method, "int8": args.int8,
                      "lms": sorted(rec.lms), "num_threads": args.num_threads}
            if rec.decoding_method == "modified_beam_search":
                search.update(beam=rec.beam, lm_scale=rec.lm_scale,
                              lm_token_bonus=rec.lm_token_bonus if rec.lms else None)
            args.scores_json.write_text(json.dumps({"cuts": str(args.cuts), "utterances": len(hyps), "rtf": rtf,
                                                    "search": search, "scores": scores}, indent=1) + "\n")


if __name__ == "__main__":
    main()
