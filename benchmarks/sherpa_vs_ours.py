#!/usr/bin/env python3
"""Our onnxruntime streaming recognizer against sherpa-onnx on the same exported model.

Usage:
  python benchmarks/sherpa_vs_ours.py                           # random paper-size model, synthetic audio
  python benchmarks/sherpa_vs_ours.py --encoder tiny --duration 2 --num-utts 2
  python benchmarks/sherpa_vs_ours.py --model-dir egs/synth/exp/cond_p/onnx --wavs a.wav wavs/

Both sides get the same files (``python -m zipformer_pc.export``'s layout), the same
16 kHz audio fed in pieces of ``--piece-seconds`` as a live stream, the
intra-op threads of ``--threads`` (sherpa-onnx gives them to every session,
ours to the encoder's only: on 2 cores that split is faster) and greedy
search.  For every output mode the model has, our
:class:`zipformer_pc.runtime.StreamingRecognizer` searching that mode only is timed
against ``sherpa_onnx.OnlineRecognizer.from_transducer`` loaded with the
mode's ``(encoder, decoder-MODE, joiner-MODE)`` triple, in fp32 and int8.  The
time of one utterance runs from creating the stream to the final result
(feature extraction, encoder, search).  Both get the same tail padding
(sherpa-onnx runs a chunk once one frame more than its input is ready, so it
gets one extra padding frame).  The runs alternate within each of
``--repeats`` passes over the audio and the fastest pass of each counts, which
damps the effect of other load on the machine.

Printed: RTF of each side, the ratio ours/sherpa (goal: <= 1.3), how many
transcripts agree, tokens emitted per second; and, for a model with both
modes, our RTF searching both modes from one encoder pass against searching
one (goal: <= 1.15).  Prints the figures; asserts nothing.

Without ``--model-dir`` a model with random weights is built (``--encoder``
size, ``--model-type``, ``--vocab-size`` tokens) and exported (fp32 + int8) to
a temporary directory (``--keep-dir`` keeps it).  A random joiner would emit a
token on nearly every frame, which a trained model never does, and greedy
search's cost depends on that; so each joiner's output layer is replaced
(``zipformer_pc.export.random_model``) so that greedy search emits on about
``--emit-fraction`` of the encoder frames (a trained model emits on roughly a
sixth to a tenth of them), choosing varied tokens.  Without ``--wavs`` the
audio is ``--num-utts`` synthetic utterances of ``--duration`` seconds
(a voiced, syllable-modulated signal after 0.3 s of silence).
"""

import argparse
import gc
import math
import shutil
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from zipformer_pc.export import random_model
from zipformer_pc.layout import DEFAULT_CHUNK_SIZE, DEFAULT_LEFT_CONTEXT_FRAMES
from zipformer_pc.export.random_model import synthetic_utterance
from zipformer_pc.runtime import Resampler, StreamingRecognizer, find_model_files, read_wav
from zipformer_pc.runtime.audio import wav_files

RATE = 16000
GOAL_RATIO = 1.3
GOAL_BOTH = 1.15


# ---------------------------------------------------------------------------
# audio


def load_wavs(paths: Sequence[str]) -> List[Tuple[str, np.ndarray]]:
    """The wav files (folders searched recursively), resampled to 16 kHz outside any timing."""
    try:
        files = wav_files(paths)
    except FileNotFoundError as e:
        raise SystemExit(f"sherpa_vs_ours.py: {e}") from None
    if not files:
        raise SystemExit("sherpa_vs_ours.py: no wav file found in --wavs")
    out = []
    for f in files:
        x, rate = read_wav(str(f))
        if rate != RATE:
            r = Resampler(rate, RATE)
            x = np.concatenate([r.process(x), r.flush()])
        out.append((f.stem, x.astype(np.float32)))
    return out


# ---------------------------------------------------------------------------
# a random model that emits like a trained one


def build_random_export(args: argparse.Namespace, out_dir: Path, calibration: np.ndarray) -> Tuple[str, int]:
    """Export a random model (fp32 + int8) as the options ask; its description and parameter count."""
    import torch

    torch.set_num_threads(1)
    return random_model.build_random_export(out_dir, calibration, args.encoder, args.model_type, args.vocab_size,
                                            args.seed, args.emit_fraction, args.chunk_size,
                                            args.left_context_frames)


# ---------------------------------------------------------------------------
# timing


def time_ours(rec: StreamingRecognizer, audio: Sequence[np.ndarray], piece: float
              ) -> Tuple[float, List[Dict[str, str]], Dict[str, int]]:
    """Seconds for all of ``audio``, the transcripts, and the tokens emitted per mode."""
    step = max(1, int(piece * RATE))
    total, texts, tokens = 0.0, [], {m: 0 for m in rec.search_modes}
    for x in audio:
        t0 = time.perf_counter()
        s = rec.create_stream()
        for i in range(0, len(x), step):
            s.accept_waveform(RATE, x[i : i + step])
            rec.decode_stream(s)
        s.input_finished()
        rec.decode_stream(s)
        res = rec.get_result(s)
        total += time.perf_counter() - t0
        texts.append(res)
        for m, t in rec.get_tokens(s).items():
            tokens[m] += len(t)
    return total, texts, tokens


def time_sherpa(rec, ours: StreamingRecognizer, audio: Sequence[np.ndarray], piece: float) -> Tuple[float, List[str]]:
    step = max(1, int(piece * RATE))
    total, texts = 0.0, []
    for x in audio:
        # the tail padding ours adds in input_finished, plus the frame sherpa-onnx waits for
        pad = np.zeros((ours.tail_padding_frames(len(x), 0) + 1) * ours.frame_shift, dtype=np.float32)
        t0 = time.perf_counter()
        st = rec.create_stream()
        for i in range(0, len(x), step):
            st.accept_waveform(RATE, x[i : i + step])
            while rec.is_ready(st):
                rec.decode_stream(st)
        st.accept_waveform(RATE, pad)
        st.input_finished()
        while rec.is_ready(st):
            rec.decode_stream(st)
        text = rec.get_result(st)
        total += time.perf_counter() - t0
        texts.append(" ".join(text.split()))
    return total, texts, {}


def sherpa_recognizer(files: Dict[str, Path], mode: str, meta: Dict[str, str], threads: int = 1):
    import sherpa_onnx

    return sherpa_onnx.OnlineRecognizer.from_transducer(
        tokens=str(files["tokens"]), encoder=str(files["encoder"]), decoder=str(files[f"decoder-{mode}"]),
        joiner=str(files[f"joiner-{mode}"]), num_threads=threads, sample_rate=int(float(meta["fbank_sampling_rate"])),
        feature_dim=int(meta["fbank_num_mel_bins"]), low_freq=float(meta["fbank_low_freq"]),
        high_freq=float(meta["fbank_high_freq"]), dither=float(meta["fbank_dither"]),
        snip_edges=meta["fbank_snip_edges"] == "true", decoding_method="greedy_search")


def compare(files: Dict[str, Path], audio: Sequence[np.ndarray], args: argparse.Namespace,
            threads: int = 1) -> Dict[str, object]:
    """Best-of-``repeats`` seconds of every run on one precision's files, ``threads``
    intra-op threads: sherpa-onnx gives them to every session, ours to the encoder's
    (its decoder and joiner sessions keep one).  Ours shows P as searched
    (no question model) and no blank penalty, as sherpa-onnx does by default, so the texts can match."""
    both = StreamingRecognizer(files, num_threads=threads, questions=False, blank_penalty=0.0)
    modes = list(both.search_modes)
    ours = {m: StreamingRecognizer(files, num_threads=threads, modes=[m], questions=False, blank_penalty=0.0)
            for m in modes}
    sherpa = {m: sherpa_recognizer(files, m, both.meta, threads) for m in modes}
    runs = [(f"sherpa-{m}", m) for m in modes] + [(f"ours-{m}", m) for m in modes]
    if len(modes) > 1:
        runs.append(("ours-both", None))
    best: Dict[str, float] = {}
    texts: Dict[str, list] = {}
    tokens: Dict[str, int] = {}

    def run(key: str, mode: Optional[str], clip: Sequence[np.ndarray]):
        if key.startswith("sherpa"):
            return time_sherpa(sherpa[mode], both, clip, args.piece_seconds)
        return time_ours(ours[mode] if mode else both, clip, args.piece_seconds)

    for key, mode in runs:  # warm-up, untimed
        run(key, mode, [audio[0][: 2 * RATE]])
    for r in range(args.repeats):
        order = runs if r % 2 == 0 else runs[::-1]
        for key, mode in order:
            seconds, out, emitted = run(key, mode, audio)
            best[key] = min(best.get(key, math.inf), seconds)
            texts[key] = out
            if key.startswith("ours-") and mode:
                tokens[mode] = emitted[mode]
    result: Dict[str, object] = {"modes": modes, "best": best}
    result["agree"] = {m: sum(o[m] == s for o, s in zip(texts[f"ours-{m}"], texts[f"sherpa-{m}"])) for m in modes}
    result["tokens"] = tokens
    return result


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model-dir", type=Path, default=None, help="an existing export (default: a random model)")
    p.add_argument("--wavs", nargs="*", default=[], help="wav files or folders (default: synthetic audio)")
    p.add_argument("--encoder", default="paper", help="encoder config of the random model [paper]")
    p.add_argument("--model-type", default="conditioned", help="model type of the random model [conditioned]")
    p.add_argument("--vocab-size", type=int, default=500, help="tokens of the random model [500]")
    p.add_argument("--emit-fraction", type=float, default=0.15,
                   help="fraction of encoder frames the random model emits on [0.15]")
    p.add_argument("--chunk-size", type=int, default=DEFAULT_CHUNK_SIZE,
                   help=f"export chunk, 50 Hz frames [{DEFAULT_CHUNK_SIZE}]")
    p.add_argument("--left-context-frames", type=int, default=DEFAULT_LEFT_CONTEXT_FRAMES,
                   help=f"export left context [{DEFAULT_LEFT_CONTEXT_FRAMES}]")
    p.add_argument("--num-utts", type=int, default=4, help="synthetic utterances [4]")
    p.add_argument("--duration", type=float, default=8.0, help="seconds per synthetic utterance [8]")
    p.add_argument("--piece-seconds", type=float, default=0.1, help="audio per accept_waveform call [0.1]")
    p.add_argument("--precisions", default="fp32,int8", help="comma list of fp32,int8 [fp32,int8]")
    p.add_argument("--repeats", type=int, default=3, help="timed passes over the audio; the fastest counts [3]")
    p.add_argument("--threads", default="1",
                   help="comma list of intra-op thread counts to run both sides with, e.g. 1,2; with more than "
                        "one, each side's best setting is compared too [1]")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--keep-dir", type=Path, default=None, help="export the random model here and keep it")
    return p


def main(argv=None) -> Dict[str, Dict[str, object]]:
    args = get_parser().parse_args(argv)
    precisions = [p.strip() for p in args.precisions.split(",") if p.strip()]
    if not precisions or any(p not in ("fp32", "int8") for p in precisions):
        raise SystemExit(f"sherpa_vs_ours.py: --precisions must list fp32 and/or int8, got {args.precisions!r}")
    if args.repeats < 1 or args.num_utts < 1 or args.duration <= 0:
        raise SystemExit("sherpa_vs_ours.py: --repeats, --num-utts and --duration must be positive")
    try:
        thread_counts = [int(t) for t in args.threads.split(",") if t.strip()]
    except ValueError:
        thread_counts = []
    if not thread_counts or min(thread_counts) < 1:
        raise SystemExit(f"sherpa_vs_ours.py: --threads must list positive integers, got {args.threads!r}")
    if args.wavs:
        named = load_wavs(args.wavs)
        source = f"{len(named)} wav file(s)"
    else:
        named = [(f"synth{i}", synthetic_utterance(args.duration, args.seed + i)) for i in range(args.num_utts)]
        source = f"{args.num_utts} synthetic utterance(s) of {args.duration:g} s"
    audio = [x for _, x in named]
    seconds = sum(len(x) for x in audio) / RATE

    tmp: Optional[Path] = None
    if args.model_dir is not None:
        model_dir = args.model_dir
        if not model_dir.is_dir():
            raise SystemExit(f"sherpa_vs_ours.py: --model-dir {model_dir} does not exist")
        desc, params = f"export in {model_dir}", None
    else:
        if args.keep_dir is not None:
            model_dir = args.keep_dir
        else:
            tmp = Path(tempfile.mkdtemp(prefix="sherpa_vs_ours_"))
            model_dir = tmp
        t0 = time.perf_counter()
        desc, params = build_random_export(args, model_dir, audio[0])
        print(f"built and exported {desc} ({params / 1e6:.1f}M parameters) in {time.perf_counter() - t0:.0f} s",
              flush=True)
    try:
        results: Dict[str, Dict[str, object]] = {}
        sets = {}
        for prec in precisions:
            try:
                sets[prec] = find_model_files(model_dir, int8=prec == "int8")
            except FileNotFoundError as e:
                print(f"{prec}: skipped ({e})")
        if not sets:
            raise SystemExit(f"sherpa_vs_ours.py: no usable export in {model_dir}")
        print(f"model: {desc}; audio: {source}, {seconds:.1f} s in pieces of {args.piece_seconds:g} s; "
              f"threads {','.join(map(str, thread_counts))} (sherpa-onnx: every session; ours: the encoder, "
              f"decoder and joiner 1), greedy search, fastest of {args.repeats} pass(es)", flush=True)
        header = (f"{'precision':<9} {'threads':>7} {'mode':<4} {'sherpa RTF':>10} {'ours RTF':>9} "
                  f"{'ours/sherpa':>11} {'same text':>9} {'tokens/s':>8}")
        print(f"\nours (1 mode searched) vs sherpa-onnx, same triple; goal ours/sherpa <= {GOAL_RATIO}")
        print(header)
        print("-" * len(header))
        for prec, files in sets.items():
            for threads in thread_counts:
                r = compare(files, audio, args, threads)
                key = prec if len(thread_counts) == 1 else f"{prec}-t{threads}"
                r["precision"], r["threads"] = prec, threads
                results[key] = r
                best = r["best"]  # type: ignore[assignment]
                for m in r["modes"]:  # type: ignore[union-attr]
                    s_rtf, o_rtf = best[f"sherpa-{m}"] / seconds, best[f"ours-{m}"] / seconds
                    r[f"ratio-{m}"] = o_rtf / s_rtf
                    print(f"{prec:<9} {threads:>7} {m:<4} {s_rtf:>10.4f} {o_rtf:>9.4f} {o_rtf / s_rtf:>11.2f} "
                          f"{r['agree'][m]:>4}/{len(audio):<4} {r['tokens'][m] / seconds:>8.1f}", flush=True)
                gc.collect()
        if len(thread_counts) > 1:
            print("\neach side at its fastest thread setting (per precision and mode)")
            measured = list(results.values())  # not the "best" entries added below
            for prec in sets:
                rows = [r for r in measured if r["precision"] == prec]
                for m in rows[0]["modes"]:  # type: ignore[union-attr]
                    s_best = min(rows, key=lambda r: r["best"][f"sherpa-{m}"])  # type: ignore[index]
                    o_best = min(rows, key=lambda r: r["best"][f"ours-{m}"])  # type: ignore[index]
                    s_rtf = s_best["best"][f"sherpa-{m}"] / seconds  # type: ignore[index]
                    o_rtf = o_best["best"][f"ours-{m}"] / seconds  # type: ignore[index]
                    results[f"{prec}-best-{m}"] = {"sherpa_threads": s_best["threads"], "sherpa_rtf": s_rtf,
                                                   "ours_threads": o_best["threads"], "ours_rtf": o_rtf,
                                                   "ratio": o_rtf / s_rtf}
                    print(f"{prec:<9} {m:<4} sherpa-onnx {s_rtf:.4f} ({s_best['threads']} thread(s)), ours "
                          f"{o_rtf:.4f} ({o_best['threads']} encoder thread(s)): ours/sherpa {o_rtf / s_rtf:.2f}",
                          flush=True)
        both_rows = [(p, r) for p, r in results.items() if "ours-both" in r.get("best", {})]  # type: ignore[operator]
        if both_rows:
            print(f"\nours, both modes from one encoder pass vs one mode searched; goal both/single <= {GOAL_BOTH}")
            for key, r in both_rows:
                best = r["best"]  # type: ignore[assignment]
                both_rtf = best["ours-both"] / seconds
                parts = []
                for m in r["modes"]:  # type: ignore[union-attr]
                    single = best[f"ours-{m}"] / seconds
                    r[f"both_over_{m}"] = both_rtf / single
                    parts.append(f"single {m} {single:.4f} (both/single {both_rtf / single:.2f})")
                print(f"{key:<9} both {both_rtf:.4f}; " + "; ".join(parts), flush=True)
        return results
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
