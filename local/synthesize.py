#!/usr/bin/env python3
"""Synthesize one split of the synthetic corpus and write its lhotse manifests.

Usage:
  ./local/synthesize.py --text data/synth/text/train.jsonl --voices train \
      --audio-dir data/synth/audio/train --manifest-dir data/synth/manifests \
      --split train --nj 2 --seed 42

Each utterance of the text file (from local/prepare_synth_text.py) is read by
one voice of the chosen pool (``train``: the in-domain speakers, also used for
dev/test; ``ood``: held-out speakers), with random prosody: espeak-ng rate
+-10% and pitch +-10, and for every engine a sox pitch shift (+-80 cents) and
tempo (0.92..1.08).  Voice and prosody are drawn from ``--seed`` and the
utterance id, so the result does not depend on ``--nj``.

``--voice-set wide`` (with ``--voices train`` only; prepare.sh uses it for the
train split) reads with tts.WIDE_VOICES instead: the in-domain voices plus
~570 espeak-ng variants of the in-domain dialects and flite kal, 70% of the
utterances by espeak-ng (tts.WIDE_ESPEAK_SHARE).  Its prosody is wider:
espeak-ng rate +-15% and pitch +-25, a sox pitch shift of -400..+600 cents
(sox ``pitch`` moves the formants too, which approximates other vocal tracts:
flite and festival have only three male speakers) and tempo 0.85..1.15; then
each of three mild sox effects with its own probability: a band limit (30%:
high-pass 50..300 Hz, low-pass 3.4..7 kHz), one peaking EQ band (30%:
300 Hz..4 kHz, +-6 dB) and a small-room reverb (20%: reverberance 10..40%);
finally a level of -10..-1 dB full scale (sox ``gain -n``, which also prevents
clipping).  The effects are recorded in ``custom["tts"]["sox_effects"]``.
``--voice-set mixed`` reads each utterance with the default set (voices and
prosody as above) or, with probability tts.MIXED_WIDE_SHARE, with the wide
set: training speech that keeps most of its hours on the in-domain voices and
still meets hundreds of others.
``--extra-voices F`` (train only, with any voice set) reads each utterance,
with probability F, with one of tts.EXTRA_VOICES (12 speakers of five more
engines: svox pico, RHVoice, MBROLA, festival rab/don, Piper; the default
prosody ranges), and otherwise exactly as without the option (same voice,
prosody and audio file: the audio of a corpus built without it is reused).
``--kokoro-voices F`` (train only) likewise reads each utterance, with
probability F, with one of tts.KOKORO_VOICES (24 speakers of the neural
Kokoro-82M model; default prosody ranges), drawn before and independently of
``--extra-voices``: every other utterance is read as without the option.
``--kokoro-blends K`` adds K new speakers to that pool, each the weighted
mean of the style tables of two or three of its speakers of one accent
(tts.kokoro_blends); 0 (the default) leaves every draw as before.
``--voice-set default`` gives the same voices, prosody and files as before
the option existed.

Audio: 16 kHz mono FLAC.  Manifests: ``synth_recordings_{split}.jsonl.gz`` and
``synth_supervisions_{split}.jsonl.gz``; each supervision carries N in
``text``, P in ``custom["text_p"]`` (see zipformer_pc.data.references), the
speaker (voice name) and the engine, voice and prosody in ``custom["tts"]``.
Existing audio files are reused (their names hash the text and prosody), so
an interrupted run resumes.  Utterances
whose synthesis fails are logged with their id, counted and skipped.
"""

import argparse
import hashlib
import json
import logging
import multiprocessing as mp
import os
import random
from pathlib import Path
from typing import Dict, List, Optional, Tuple

# tts.py is this script's sibling: its folder is on sys.path when run as `python local/synthesize.py`
from tts import (ESPEAK_ENGINES, EXTRA_VOICES, KOKORO_OOD_VOICES, KOKORO_VOICES, MIXED_WIDE_SHARE, OOD_VOICES,
                 TRAIN_VOICES, WIDE_ESPEAK_SHARE, WIDE_VOICES, Synthesizer, Voice, check_tools, kokoro_blends,
                 voice_dict)

from zipformer_pc.data.references import SYNTH_PUNCT, reference_fields
from zipformer_pc.logs import setup_logging

_worker_synth: Optional[Synthesizer] = None


def _init_worker() -> None:
    global _worker_synth
    _worker_synth = Synthesizer()


def _render(job: Tuple[str, Dict, str]) -> Tuple[str, Optional[str]]:
    """Render one utterance; returns (id, error message or None)."""
    utt_id, params, out = job
    if os.path.exists(out) and os.path.getsize(out) > 0:
        return utt_id, None
    tmp = out + ".part.flac"
    try:
        v = Voice(**params["voice"])
        assert _worker_synth is not None
        _worker_synth.render(v, params["text"], tmp, params["rate"], params["pitch"],
                             params["sox_pitch_cents"], params["sox_tempo"], params.get("sox_effects", ()))
        os.replace(tmp, out)
        return utt_id, None
    except Exception as e:  # logged and counted by the caller
        if os.path.exists(tmp):
            os.remove(tmp)
        return utt_id, f"{type(e).__name__}: {str(e)[-300:]}"


# Prosody of each voice set: espeak rate factor range, espeak pitch offset
# (+-), sox pitch shift range (cents), sox tempo range.
PROSODY_RANGES = {
    "default": {"rate": (0.9, 1.1), "pitch": 10, "cents": (-80, 80), "tempo": (0.92, 1.08)},
    "wide": {"rate": (0.85, 1.15), "pitch": 25, "cents": (-400, 600), "tempo": (0.85, 1.15)},
}


def wide_effects(rng: random.Random) -> List[str]:
    """The wide set's extra sox effects for one utterance (see the module docstring)."""
    effects: List[str] = []
    if rng.random() < 0.3:  # band limit, as by a cheap microphone or a phone line
        effects += ["sinc", f"{rng.randint(50, 300)}-{rng.randint(3400, 7000)}"]
    if rng.random() < 0.3:  # one peaking EQ band: a coloured microphone or room
        freq = round(300 * (4000 / 300) ** rng.random())
        effects += ["equalizer", str(freq), f"{rng.uniform(0.7, 2.0):.2f}q", f"{rng.uniform(-6, 6):.1f}"]
    if rng.random() < 0.2:  # a small room: reverberance %, HF damping %, room scale %
        effects += ["reverb", str(rng.randint(10, 40)), "50", str(rng.randint(20, 60))]
    effects += ["gain", "-n", f"{rng.uniform(-10, -1):.1f}"]
    return effects


def prosody(utt_id: str, voices: List[Voice], seed: int, voice_set: str = "default", extra_share: float = 0.0,
            kokoro_share: float = 0.0, kokoro_speakers: Optional[List[Voice]] = None) -> Dict:
    """Voice and prosody for one utterance, a function of (seed, id) only.

    ``voice_set`` picks the ranges of PROSODY_RANGES; ``wide`` also draws the
    engine family first (WIDE_ESPEAK_SHARE) and adds ``sox_effects``;
    ``mixed`` first draws which of the two sets reads the utterance
    (MIXED_WIDE_SHARE): the wide one from ``voices``, the default one from
    TRAIN_VOICES.  With ``extra_share`` > 0, a stream of its own first draws
    whether EXTRA_VOICES read the utterance (default ranges); if not, the
    draw is the one without extra voices.  ``kokoro_share`` does the same
    with ``kokoro_speakers`` (KOKORO_VOICES, or those and blended speakers: ``kokoro_pool()``), on a stream
    of its own drawn before the extra one."""
    h = int.from_bytes(hashlib.sha256(f"{seed}:{utt_id}".encode()).digest()[:8], "little")
    if kokoro_share > 0 and random.Random(f"kokoro:{h}").random() < kokoro_share:
        voices, voice_set = kokoro_speakers or KOKORO_VOICES, "default"
    elif extra_share > 0 and random.Random(f"extra:{h}").random() < extra_share:
        voices, voice_set = EXTRA_VOICES, "default"
    rng = random.Random(h)
    if voice_set == "mixed":
        voice_set = "wide" if rng.random() < MIXED_WIDE_SHARE else "default"
        if voice_set == "default":
            voices = TRAIN_VOICES
    r = PROSODY_RANGES[voice_set]
    if voice_set == "wide":
        espeak = [v for v in voices if v.engine == "espeak-ng"]
        other = [v for v in voices if v.engine != "espeak-ng"]
        use_espeak = rng.random() < WIDE_ESPEAK_SHARE
        family = espeak if (use_espeak and espeak) or not other else other
        v = family[rng.randrange(len(family))]
    else:
        v = voices[rng.randrange(len(voices))]
    rate = pitch = 0
    if v.engine in ESPEAK_ENGINES:
        rate = int(round(v.rate * rng.uniform(*r["rate"])))
        pitch = max(0, min(99, v.pitch + rng.randint(-r["pitch"], r["pitch"])))
    params = {
        "voice": voice_dict(v),
        "rate": rate,
        "pitch": pitch,
        "sox_pitch_cents": rng.randint(*r["cents"]),
        "sox_tempo": round(rng.uniform(*r["tempo"]), 3),
    }
    if voice_set == "wide":
        params["sox_effects"] = wide_effects(rng)
    return params


def kokoro_pool(blends: int) -> List[Voice]:
    """The Kokoro speakers ``--kokoro-voices`` reads with: KOKORO_VOICES and ``--kokoro-blends`` new ones."""
    return KOKORO_VOICES + kokoro_blends(blends)


def voice_pool(voices: str, voice_set: str, extra_share: float = 0.0, kokoro_share: float = 0.0) -> List[Voice]:
    """The voices of ``--voices`` and ``--voice-set`` (EXTRA_VOICES and
    KOKORO_VOICES are not in it: ``prosody`` adds them); checks
    ``--extra-voices`` and ``--kokoro-voices``."""
    for option, share in (("--extra-voices", extra_share), ("--kokoro-voices", kokoro_share)):
        if not 0.0 <= share <= 1.0:
            raise ValueError(f"{option} is a share of the utterances (0..1), not {share}")
    if voices in ("ood", "kokoro_ood"):
        if voice_set != "default":
            raise ValueError(f"--voice-set {voice_set} is a training pool: the held-out voices have no wide set")
        if extra_share:
            raise ValueError("--extra-voices is a training pool: the held-out voices have none")
        if kokoro_share:
            raise ValueError("--kokoro-voices is a training pool: the held-out voices have none")
        return OOD_VOICES if voices == "ood" else KOKORO_OOD_VOICES
    return WIDE_VOICES if voice_set in ("wide", "mixed") else TRAIN_VOICES


def audio_path(audio_dir: Path, utt_id: str, params: Dict) -> Path:
    """The audio file of one utterance: its name hashes ``params`` (text and
    prosody), so a reused file always holds exactly this utterance (safe
    resume after option changes)."""
    digest = hashlib.sha1(json.dumps(params, sort_keys=True).encode()).hexdigest()[:10]
    return audio_dir / f"{utt_id}-{digest}.flac"


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--text", required=True, help="Utterance text file (jsonl)")
    p.add_argument("--voices", choices=["train", "ood", "kokoro_ood"], required=True,
                   help="train: in-domain (TRAIN_VOICES), ood: held out (OOD_VOICES, test_ood), kokoro_ood: the "
                        "held-out Kokoro speakers (KOKORO_OOD_VOICES, research/ood_factors.py)")
    p.add_argument("--voice-set", choices=["default", "wide", "mixed"], default="default",
                   help="Voices and prosody of --voices train: default (TRAIN_VOICES), wide (WIDE_VOICES) "
                        "or mixed (each utterance one of the two, MIXED_WIDE_SHARE wide)")
    p.add_argument("--extra-voices", type=float, default=0.0,
                   help="Share of the --voices train utterances read by tts.EXTRA_VOICES (other engines' "
                        "speakers); the others are read as without it")
    p.add_argument("--kokoro-voices", type=float, default=0.0,
                   help="Share of the --voices train utterances read by tts.KOKORO_VOICES (the neural Kokoro-82M "
                        "model's speakers), drawn first; the others are read as without it")
    p.add_argument("--kokoro-blends", type=int, default=0,
                   help="Add this many new Kokoro speakers to the --kokoro-voices pool, each a blend of the style "
                        "tables of two or three of its speakers of one accent (tts.kokoro_blends) [0]")
    p.add_argument("--split", required=True, help="Split name used in manifest file names")
    p.add_argument("--audio-dir", required=True)
    p.add_argument("--manifest-dir", required=True)
    p.add_argument("--nj", type=int, default=2)
    p.add_argument("--seed", type=int, default=42)
    return p


def main() -> None:
    setup_logging()
    args = get_parser().parse_args()
    from lhotse import Recording, RecordingSet, SupervisionSegment, SupervisionSet
    from tqdm import tqdm

    try:
        voices = voice_pool(args.voices, args.voice_set, args.extra_voices, args.kokoro_voices)
        kokoro = kokoro_pool(args.kokoro_blends)
        if args.kokoro_blends and not args.kokoro_voices:
            raise ValueError("--kokoro-blends adds speakers to the --kokoro-voices share: give that share too")
    except ValueError as e:
        raise SystemExit(str(e))
    check_tools(voices + (EXTRA_VOICES if args.extra_voices else []) + (kokoro if args.kokoro_voices else []))
    audio_dir = Path(args.audio_dir)
    audio_dir.mkdir(parents=True, exist_ok=True)
    manifest_dir = Path(args.manifest_dir)
    manifest_dir.mkdir(parents=True, exist_ok=True)

    utts = [json.loads(line) for line in open(args.text, encoding="utf-8") if line.strip()]
    jobs = []
    params_of = {}
    for u in utts:
        params = prosody(u["id"], voices, args.seed, args.voice_set, args.extra_voices, args.kokoro_voices, kokoro)
        params["text"] = u["tts_text"]
        params_of[u["id"]] = params
        params["audio"] = str(audio_path(audio_dir, u["id"], params))
        jobs.append((u["id"], params, params["audio"]))

    failed: Dict[str, str] = {}
    with mp.get_context("fork").Pool(args.nj, initializer=_init_worker) as pool:
        for utt_id, err in tqdm(pool.imap_unordered(_render, jobs, chunksize=4), total=len(jobs),
                                desc=f"synthesize {args.split}", mininterval=5):
            if err:
                failed[utt_id] = err
                logging.warning(f"Synthesis failed for {utt_id}: {err}")

    recordings, supervisions = [], []
    bad_audio = 0
    for u in utts:
        if u["id"] in failed:
            continue
        path = params_of[u["id"]]["audio"]
        try:
            rec = Recording.from_file(path, recording_id=u["id"])
        except Exception as e:
            bad_audio += 1
            logging.warning(f"Unreadable audio for {u['id']} ({path}): {e}")
            continue
        params = params_of[u["id"]]
        refs = reference_fields(u["text_raw"], config=SYNTH_PUNCT)
        custom = dict(refs["custom"])
        custom["tts"] = {k: params[k] for k in ("voice", "rate", "pitch", "sox_pitch_cents", "sox_tempo", "sox_effects")
                         if k in params}
        custom["source"] = u["source"]
        recordings.append(rec)
        supervisions.append(
            SupervisionSegment(
                id=u["id"], recording_id=u["id"], start=0.0, duration=rec.duration, channel=0,
                text=refs["text"], language="English", speaker=params["voice"]["name"], custom=custom,
            )
        )
    RecordingSet.from_recordings(recordings).to_file(manifest_dir / f"synth_recordings_{args.split}.jsonl.gz")
    SupervisionSet.from_segments(supervisions).to_file(manifest_dir / f"synth_supervisions_{args.split}.jsonl.gz")
    hours = sum(r.duration for r in recordings) / 3600
    logging.info(
        f"{args.split}: {len(recordings)} utterances, {hours:.2f} h; "
        f"{len(failed)} synthesis failures, {bad_audio} unreadable files skipped"
    )
    if not recordings:
        raise SystemExit(f"No utterance of {args.split} could be synthesized")


if __name__ == "__main__":
    main()
