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
from tts import OOD_VOICES, TRAIN_VOICES, Synthesizer, Voice, check_tools, voice_dict

from zipformer_pc.data.references import SYNTH_PUNCT, reference_fields

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
                             params["sox_pitch_cents"], params["sox_tempo"])
        os.replace(tmp, out)
        return utt_id, None
    except Exception as e:  # logged and counted by the caller
        if os.path.exists(tmp):
            os.remove(tmp)
        return utt_id, f"{type(e).__name__}: {str(e)[-300:]}"


def prosody(utt_id: str, voices: List[Voice], seed: int) -> Dict:
    """Voice and prosody for one utterance, a function of (seed, id) only."""
    h = int.from_bytes(hashlib.sha256(f"{seed}:{utt_id}".encode()).digest()[:8], "little")
    rng = random.Random(h)
    v = voices[rng.randrange(len(voices))]
    rate = pitch = 0
    if v.engine == "espeak-ng":
        rate = int(round(v.rate * rng.uniform(0.9, 1.1)))
        pitch = max(0, min(99, v.pitch + rng.randint(-10, 10)))
    return {
        "voice": voice_dict(v),
        "rate": rate,
        "pitch": pitch,
        "sox_pitch_cents": rng.randint(-80, 80),
        "sox_tempo": round(rng.uniform(0.92, 1.08), 3),
    }


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--text", required=True, help="Utterance text file (jsonl)")
    p.add_argument("--voices", choices=["train", "ood"], required=True)
    p.add_argument("--split", required=True, help="Split name used in manifest file names")
    p.add_argument("--audio-dir", required=True)
    p.add_argument("--manifest-dir", required=True)
    p.add_argument("--nj", type=int, default=2)
    p.add_argument("--seed", type=int, default=42)
    return p


def main() -> None:
    logging.basicConfig(format="%(asctime)s %(levelname)s [%(filename)s] %(message)s", level=logging.INFO)
    args = get_parser().parse_args()
    from lhotse import Recording, RecordingSet, SupervisionSegment, SupervisionSet
    from tqdm import tqdm

    voices = TRAIN_VOICES if args.voices == "train" else OOD_VOICES
    check_tools(voices)
    audio_dir = Path(args.audio_dir)
    audio_dir.mkdir(parents=True, exist_ok=True)
    manifest_dir = Path(args.manifest_dir)
    manifest_dir.mkdir(parents=True, exist_ok=True)

    utts = [json.loads(line) for line in open(args.text, encoding="utf-8") if line.strip()]
    jobs = []
    params_of = {}
    for u in utts:
        params = prosody(u["id"], voices, args.seed)
        params["text"] = u["tts_text"]
        params_of[u["id"]] = params
        # The file name carries a hash of text and prosody, so a reused file
        # always holds exactly this utterance (safe resume after option changes).
        digest = hashlib.sha1(json.dumps(params, sort_keys=True).encode()).hexdigest()[:10]
        params["audio"] = str(audio_dir / f"{u['id']}-{digest}.flac")
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
        custom["tts"] = {k: params[k] for k in ("voice", "rate", "pitch", "sox_pitch_cents", "sox_tempo")}
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
