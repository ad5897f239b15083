#!/usr/bin/env python3
"""Transcribe recordings without transcripts with Whisper base (a teacher), keep
the transcripts it is sure of, and write them as a transcript table that
``prepare.sh --dataset custom`` reads.

Usage:
  ./local/pseudo_label.py --manifest download/games/bass/manifest.tsv --speaker bass \\
      --manifest download/games/fotaq/manifest.tsv --speaker fotaq \\
      --output data/games/pseudo.tsv
  ./prepare.sh --dataset custom --custom-dir data/games/pseudo.tsv --data-dir data/games \\
      --bpe-model egs/synth/pretrained/bpe.model

Why: no corpus of read speech with transcripts installs here, but hours of
recorded speech do (the voice acting of the freeware games in Debian,
``local/extract_bass.py`` and ``local/extract_fotaq.py``).  Whisper base
(``bash tools/setup_env.sh --whisper``; faster-whisper, CPU, int8) writes
cased, punctuated text for them, which gives both references, P and N, by
the one normalization, as for any custom corpus.  The labels are a
teacher's: they carry its errors, so only the confident ones are kept.

``--manifest`` is a TSV with a header naming at least ``id`` and ``path``
(the extractors' ``manifest.tsv``), one ``--speaker`` label per manifest (the
speakers' names are not known: one label per source, so the custom split
goes by utterance).

Every result is appended to ``OUTPUT.raw.tsv`` as it comes (Whisper's text,
the mean log probability of its words, the no-speech probability and the
compression ratio of its window), so an interrupted run goes on where it
stopped, and ``--labels`` reads such files made elsewhere (by recording id:
the paths come from the manifests), so that a fresh machine need not run
Whisper again.  The kept rows go to
``--output`` (``path<TAB>text<TAB>speaker``).  A transcript is dropped, and
counted by reason, when it is empty, has digits or symbols that the
normalization cannot spell (Whisper writes "7" and "%"), when its mean log
probability is below ``--min-logprob``, its window's no-speech probability
above ``--max-no-speech`` with a mean log probability below -0.3 (Whisper's
own rule pairs the two), its window's compression ratio above
``--max-compression`` or fewer than 40% of its words distinct (a repeating
hallucination, or the clucking of a chicken written "Buking, buking."), or its speaking rate outside 0.5..7 words per
second.  Deterministic: greedy search (``--beam-size 1``) or beam search,
temperature 0 only, no previous text as prompt.
"""

import argparse
import csv
import logging
import random
import re
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Dict, List, Tuple

import numpy as np
import soundfile as sf

from zipformer_pc.logs import setup_logging


SAMPLE_RATE = 16000
# letters, apostrophes, hyphens, spaces and marks only: what the normalization turns into words
TEXT_OK = re.compile(r"^[A-Za-z][A-Za-z' .,?!;:\"\-]*$")
RAW_COLUMNS = ("id", "path", "speaker", "duration", "avg_logprob", "no_speech_prob", "compression_ratio", "text")


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--manifest", action="append", required=True, help="TSV with id and path columns (repeat)")
    p.add_argument("--speaker", action="append", default=[], help="the speaker label of each --manifest, in order")
    p.add_argument("--output", required=True, help="the kept rows: path<TAB>text<TAB>speaker")
    p.add_argument("--labels", action="append", default=[],
                   help="an OUTPUT.raw.tsv of an earlier run (repeat): its recordings, by id, are not transcribed "
                        "again (local/pseudo_labels/ holds the committed ones)")
    p.add_argument("--model", default="base", help="a CTranslate2 Whisper directory or 'base' [base]")
    p.add_argument("--beam-size", type=int, default=1)
    p.add_argument("--num-threads", type=int, default=1)
    p.add_argument("--min-logprob", type=float, default=-0.5,
                   help="the least mean log probability of a kept transcript's words [-0.5]")
    p.add_argument("--max-no-speech", type=float, default=0.5)
    p.add_argument("--max-compression", type=float, default=2.2)
    p.add_argument("--window", type=float, default=28.0,
                   help="recordings are joined into windows of at most this many seconds, Whisper's 30 at most [28]")
    p.add_argument("--gap", type=float, default=1.0, help="seconds of silence between joined recordings [1.0]")
    p.add_argument("--seed", type=int, default=42, help="the order the windows are transcribed in [42]")
    p.add_argument("--max-minutes", type=float, default=-1.0,
                   help="stop transcribing after this many minutes and write the kept rows of what is done "
                        "(a later run goes on); 0: only rewrite --output from OUTPUT.raw.tsv [no limit]")
    p.add_argument("--limit", type=int, default=0, help="only the first N recordings of each manifest (a check)")
    return p


def read_manifest(path: Path, speaker: str, limit: int) -> List[Dict[str, str]]:
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    if rows and not {"id", "path"} <= set(rows[0]):
        raise ValueError(f"{path}: the header must name 'id' and 'path', it has {sorted(rows[0])}")
    out = []
    for r in rows[:limit or None]:
        wav = Path(r["path"])
        if not wav.is_absolute():
            wav = path.parent / wav
        out.append({"id": r["id"], "path": str(wav), "speaker": speaker})
    return out


def read_done(raw_path: Path) -> Dict[str, Dict[str, str]]:
    if not raw_path.exists():
        return {}
    with open(raw_path, newline="") as f:
        return {r["id"]: r for r in csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE)}


def audio_16k(path: str) -> np.ndarray:
    """Mono float32 at 16 kHz, as Whisper wants it (faster-whisper's decoder: PyAV)."""
    from faster_whisper import decode_audio

    audio = decode_audio(path, sampling_rate=SAMPLE_RATE)
    if len(audio) == 0:
        raise ValueError("no samples")
    return np.ascontiguousarray(audio, dtype=np.float32)


def load_model(args):
    try:
        from faster_whisper import WhisperModel
    except ImportError as e:
        raise SystemExit(f"faster-whisper cannot be imported ({e}): bash tools/setup_env.sh --whisper installs it "
                         "(or give --max-minutes 0 to keep only the transcripts made before)") from None

    from zipformer_pc.whisper import ct2_model_dir

    directory = ct2_model_dir(args.model)
    if directory is None:
        raise SystemExit(f"no Whisper model '{args.model}' here: bash tools/setup_env.sh --whisper installs base")
    logging.getLogger("faster_whisper").setLevel(logging.WARNING)
    logging.info(f"Whisper from {directory}, {args.num_threads} thread(s), beam {args.beam_size}")
    return WhisperModel(str(directory), device="cpu", compute_type="int8", cpu_threads=args.num_threads,
                        local_files_only=True)


def windows(rows: List[Dict[str, str]], seconds: Dict[str, float], max_sec: float,
            gap_sec: float) -> List[List[Dict[str, str]]]:
    """Consecutive recordings packed into windows of at most ``max_sec`` seconds with
    ``gap_sec`` of silence between them (a recording longer alone is a window alone)."""
    out: List[List[Dict[str, str]]] = []
    cur: List[Dict[str, str]] = []
    cur_sec = 0.0
    for r in rows:
        sec = seconds[r["id"]]
        if cur and cur_sec + gap_sec + sec > max_sec:
            out.append(cur)
            cur, cur_sec = [], 0.0
        cur_sec += (gap_sec if cur else 0.0) + sec
        cur.append(r)
    if cur:
        out.append(cur)
    return out


def transcribe_window(model, clips: List[np.ndarray], gap_sec: float, beam: int) -> List[Dict[str, float]]:
    """Whisper on the clips joined by silences; each word goes to the clip its middle
    falls in (the silences split half and half).  Per clip: its text, the mean log
    probability of its words, and the window's no-speech probability and compression
    ratio."""
    gap = np.zeros(int(gap_sec * SAMPLE_RATE), dtype=np.float32)
    spans, parts, t = [], [], 0.0
    for i, a in enumerate(clips):
        if i:
            parts.append(gap)
            t += gap_sec
        dur = len(a) / SAMPLE_RATE
        spans.append((t, t + dur))
        parts.append(a)
        t += dur
    segments, _ = model.transcribe(np.concatenate(parts), language="en", task="transcribe", beam_size=beam,
                                   temperature=0.0, condition_on_previous_text=False, vad_filter=False,
                                   word_timestamps=True)
    segments = list(segments)
    no_speech = max((s.no_speech_prob for s in segments), default=1.0)
    compression = max((s.compression_ratio for s in segments), default=0.0)
    words: List[List[Tuple[str, float]]] = [[] for _ in clips]
    for seg in segments:
        for w in seg.words or []:
            mid = (w.start + w.end) / 2
            k = min(range(len(spans)), key=lambda j: 0.0 if spans[j][0] <= mid <= spans[j][1]
                    else min(abs(mid - spans[j][0]), abs(mid - spans[j][1])))
            words[k].append((w.word.strip(), float(w.probability)))
    out = []
    for ws in words:
        text = " ".join(w for w, _ in ws if w)
        if text:
            text = text[0].upper() + text[1:]
        lp = float(np.mean([np.log(max(p, 1e-6)) for _, p in ws])) if ws else -10.0
        out.append({"text": text, "avg_logprob": lp, "no_speech_prob": no_speech, "compression_ratio": compression})
    return out


def verdict(row: Dict[str, str], args) -> str:
    """'' to keep the row, else the reason it is dropped."""
    text = row["text"]
    if not text:
        return "empty"
    if not TEXT_OK.match(text):
        return "digits or symbols"
    if float(row["avg_logprob"]) < args.min_logprob:
        return "low log-probability"
    if float(row["no_speech_prob"]) > args.max_no_speech and float(row["avg_logprob"]) < -0.3:
        return "no speech"  # as Whisper's own rule: a window's no-speech guess alone drops nothing sure
    words = [w.strip(".,?!;:\"-").lower() for w in text.split()]
    if float(row["compression_ratio"]) > args.max_compression or (len(words) >= 4 and len(set(words)) < 0.4 * len(words)):
        return "repetitive"
    rate = len(text.split()) / max(float(row["duration"]), 1e-3)
    if not 0.5 <= rate <= 7.0:
        return "speaking rate"
    return ""


def main(argv=None) -> int:
    setup_logging()
    args = get_parser().parse_args(argv)
    if args.speaker and len(args.speaker) != len(args.manifest):
        logging.error("give one --speaker per --manifest, or none")
        return 2
    speakers = args.speaker or [Path(m).parent.name for m in args.manifest]
    todo: List[Dict[str, str]] = []
    for m, spk in zip(args.manifest, speakers):
        try:
            todo += read_manifest(Path(m), spk, args.limit)
        except (OSError, ValueError, KeyError) as e:
            logging.error(f"cannot read {m}: {e}")
            return 2
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    raw_path = out.with_name(out.name + ".raw.tsv")
    done: Dict[str, Dict[str, str]] = {}
    for labels in args.labels:  # transcripts made before, e.g. on another machine: only their ids matter
        done.update(read_done(Path(labels)))
    done.update(read_done(raw_path))
    rest = [r for r in todo if r["id"] not in done]
    logging.info(f"{len(todo)} recordings, {len(todo) - len(rest)} transcribed before, {len(rest)} to go")
    if rest and args.max_minutes != 0:
        started = time.monotonic()
        model = load_model(args)
        new_file = not raw_path.exists()
        # the windows are planned from the files' headers; each window's audio is decoded when its turn comes
        seconds: Dict[str, float] = {}
        readable = []
        for r in rest:
            try:
                seconds[r["id"]] = sf.info(r["path"]).duration
                readable.append(r)
            except Exception as e:  # an unreadable file is a counted skip, not the end of the run
                logging.warning(f"skipping {r['path']}: {type(e).__name__}: {e}")
        wins = windows(readable, seconds, args.window, args.gap)
        random.Random(args.seed).shuffle(wins)  # any prefix of the run is a sample of every source
        with open(raw_path, "a", newline="") as f:
            w = csv.writer(f, delimiter="\t", quoting=csv.QUOTE_NONE, escapechar="\\", lineterminator="\n")
            if new_file:
                w.writerow(RAW_COLUMNS)
            spent = audio_sec = 0.0
            n = 0
            for i, win in enumerate(wins, 1):
                clips, kept = [], []
                for r in win:
                    try:
                        clips.append(audio_16k(r["path"]))
                        kept.append(r)
                    except Exception as e:  # counted as not transcribed at the end
                        logging.warning(f"skipping {r['path']}: {type(e).__name__}: {e}")
                win = kept
                if not win:
                    continue
                t0 = time.perf_counter()
                results = transcribe_window(model, clips, args.gap, args.beam_size)
                spent += time.perf_counter() - t0
                for r, a, res in zip(win, clips, results):
                    dur = len(a) / SAMPLE_RATE
                    audio_sec += dur
                    row = {"id": r["id"], "path": r["path"], "speaker": r["speaker"], "duration": f"{dur:.3f}",
                           "avg_logprob": f"{res['avg_logprob']:.4f}", "no_speech_prob": f"{res['no_speech_prob']:.4f}",
                           "compression_ratio": f"{res['compression_ratio']:.3f}",
                           "text": res["text"].replace("\t", " ")}
                    w.writerow([row[c] for c in RAW_COLUMNS])
                    done[r["id"]] = row
                    n += 1
                f.flush()
                out_of_time = 0 < args.max_minutes * 60 < time.monotonic() - started
                if i % 20 == 0 or i == len(wins) or out_of_time:
                    logging.info(f"{n}/{len(readable)} transcribed ({i}/{len(wins)} windows), "
                                 f"{audio_sec / 3600:.2f} h of audio, RTF {spent / max(audio_sec, 1e-9):.3f}")
                if out_of_time:
                    logging.info(f"--max-minutes {args.max_minutes:g} reached: {len(todo) - len(done)} "
                                 "recordings left for a later run")
                    break
    reasons: Counter = Counter()
    kept_sec = 0.0
    with open(out, "w", newline="") as f:
        w = csv.writer(f, delimiter="\t", lineterminator="\n")
        w.writerow(["path", "text", "speaker"])
        for r in todo:
            row = done.get(r["id"])
            if row is None:
                reasons["not transcribed (unreadable, or left for a later run)"] += 1
                continue
            why = verdict(row, args)
            if why:
                reasons[why] += 1
                continue
            kept_sec += float(row["duration"])
            w.writerow([r["path"], row["text"], r["speaker"]])
    kept = len(todo) - sum(reasons.values())
    logging.info(f"kept {kept} of {len(todo)} recordings ({kept_sec / 3600:.2f} h) in {out}; dropped: "
                 + (", ".join(f"{k} {v}" for k, v in reasons.most_common()) or "none"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
