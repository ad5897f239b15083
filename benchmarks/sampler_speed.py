#!/usr/bin/env python3
"""The training sampler over a LibriSpeech-sized manifest: time per epoch, memory, padding.

Usage:
  nice -n 15 .venv/bin/python benchmarks/sampler_speed.py                 # 281,241 cuts, 10 vs 30 buckets
  .venv/bin/python benchmarks/sampler_speed.py --cuts 20000 --configs 10:20000,30:210000

A manifest shaped like LibriSpeech 960 h (281,241 cuts, no speed perturbation)
is generated once (``--manifest``, kept between runs): MonoCuts that name a
flac file and stored features as a real manifest's do (none exists), with durations drawn as LibriSpeech's are spread (7 in 10 between
12 and 17 s, the rest between 2 and 12 s; mean about 12.3 s) and one
supervision each whose N and P texts have 2.7 words a second, about the size of
a real manifest line.  For each ``--configs`` entry ``BUCKETS:BUFFER`` the
training loader's sampler (``PCAsrDataModule.train_dataloader``: lhotse's
DynamicBucketingSampler reading the manifest lazily, shuffled, ``--max-duration``
1000) runs one whole epoch in a process of its own, yielding the cut ids of
every batch, as the DataLoader asks for them; no audio or feature is read.

Reported: the seconds until the first batch (the bucket-boundary estimate and
the buffer filled), the seconds for the whole epoch, the growth of the peak
resident memory, the batches, the mean seconds of audio per batch and the
padding (the padded seconds, cuts x longest cut of each batch, over the audio:
what bucketing saves the encoder).  ``--scan`` also times the OOM scan's pass
over the epoch (zipformer_pc.training.guards.pessimistic_batches, words as the
token count).  ``--fbank`` times the audio path of a MUSAN-mixed cut (reading,
mixing, fbank) in seconds of audio per second of one thread.
docs/gpu-check.md holds the measured tables.
"""

import argparse
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

from zipformer_pc.machine import peak_rss, reset_peak_rss

ROOT = Path(__file__).resolve().parents[1]
LIBRISPEECH_CUTS = 281241


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cuts", type=int, default=LIBRISPEECH_CUTS)
    p.add_argument("--manifest", default="", help="The generated manifest [/tmp/zpc_sampler_N.jsonl.gz]")
    p.add_argument("--configs", default="10:20000,30:210000",
                   help="Comma list of BUCKETS:BUFFER (num_buckets, buffer_size) [the small recipe's defaults, "
                        "egs/librispeech/run.sh's icefall values]")
    p.add_argument("--max-duration", type=float, default=1000.0)
    p.add_argument("--scan", action="store_true", help="Also time the OOM scan's pass over the epoch")
    p.add_argument("--fbank", action="store_true",
                   help="Also time what a MUSAN-mixed cut costs the DataLoader: a 15 s wav mixed with a noise "
                        "window (zipformer_pc.data.musan) and its fbank computed, on one thread")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out-json", default="")
    p.add_argument("--one", default="", help=argparse.SUPPRESS)  # BUCKETS:BUFFER, the child's job
    return p


def generate(path: Path, n: int, seed: int) -> None:
    from lhotse import AudioSource, Features, MonoCut, Recording, SupervisionSegment
    from lhotse.serialization import SequentialJsonlWriter

    rng = random.Random(seed)
    words = ["the", "of", "and", "a", "to", "in", "he", "was", "that", "it", "his", "her", "with", "as", "had",
             "for", "she", "not", "at", "but", "be", "on", "they", "you", "him", "said", "which", "upon", "so"]
    with SequentialJsonlWriter(path) as w:
        for i in range(n):
            d = round(rng.uniform(12.0, 17.0) if rng.random() < 0.7 else rng.uniform(2.0, 12.0), 3)
            text = " ".join(rng.choice(words) for _ in range(max(1, round(2.7 * d))))
            cid = f"{1000 + i // 120}-{i % 997}-{i:06d}"
            sup = SupervisionSegment(id=cid, recording_id=cid, start=0.0, duration=d, channel=0, text=text,
                                     speaker=cid.split("-")[0],
                                     custom={"text_p": text.capitalize() + "."})
            # what a real cut also describes (never read here): its flac file and its stored fbank
            rec = Recording(id=cid, sources=[AudioSource(type="file", channels=[0],
                                                         source=f"download/LibriSpeech/train/{cid}.flac")],
                            sampling_rate=16000, num_samples=round(d * 16000), duration=d)
            feats = Features(type="kaldi-fbank", num_frames=round(d * 100), num_features=80, frame_shift=0.01,
                             sampling_rate=16000, start=0.0, duration=d, storage_type="lilcom_chunky",
                             storage_path="data/librispeech/fbank/librispeech_feats_train",
                             storage_key=f"{i * 40000},{round(d * 100) * 60}", recording_id=cid, channels=0)
            w.write(MonoCut(id=cid, start=0.0, duration=d, channel=0, supervisions=[sup], recording=rec,
                            features=feats))


def run_one(manifest: str, buckets: int, buffer: int, args) -> dict:
    from zipformer_pc.data.datamodule import PCAsrDataModule

    base = reset_peak_rss()
    t0 = time.perf_counter()
    dm = PCAsrDataModule(None, args.max_duration, seed=args.seed)
    sampler = dm.train_dataloader(manifest, num_buckets=buckets, bucket_buffer_size=buffer).sampler
    sampler.set_epoch(0)
    first = None
    batches = cuts = 0
    audio = padded = 0.0
    for batch in sampler:
        if first is None:
            first = time.perf_counter() - t0
        durs = [c.duration for c in batch]
        batches += 1
        cuts += len(durs)
        audio += sum(durs)
        padded += len(durs) * max(durs)
    epoch = time.perf_counter() - t0
    peak = peak_rss() - base
    row = {"num_buckets": buckets, "buffer_size": buffer, "first_batch_s": first, "epoch_s": epoch,
           "peak_memory_gb": peak / 2**30, "batches": batches, "cuts": cuts, "audio_h": audio / 3600,
           "mean_batch_s": audio / max(batches, 1), "padding": padded / max(audio, 1e-9) - 1.0}
    if args.scan:
        from zipformer_pc.training.guards import pessimistic_batches

        fresh = dm.train_dataloader(manifest, num_buckets=buckets, bucket_buffer_size=buffer).sampler
        t1 = time.perf_counter()
        worst = pessimistic_batches(fresh, lambda c: len(c.supervisions[0].text.split()))
        row["oom_scan_pass_s"] = time.perf_counter() - t1
        row["largest_padded_s"] = worst["padded_seconds"].padded_seconds
    return row


def mixed_fbank_speed(repeats: int = 10) -> dict:
    """Seconds of audio per second (one thread) of a mixed cut's audio path: a 15 s wav and a
    10 s noise wav mixed at 10-20 dB and its fbank computed, as PCAsrDataset does for a cut
    MUSAN was mixed into; and of the fbank alone."""
    import tempfile

    import numpy as np
    import soundfile as sf
    import torch
    from lhotse import CutSet, Recording

    from zipformer_pc.data.musan import MusanMixer
    from zipformer_pc.features import SAMPLING_RATE, lhotse_fbank

    torch.set_num_threads(1)
    tmp = Path(tempfile.mkdtemp())
    rng = np.random.default_rng(0)
    for name, seconds in (("speech", 15.0), ("noise", 10.0)):
        sf.write(tmp / f"{name}.wav", (0.1 * rng.standard_normal(int(SAMPLING_RATE * seconds))).astype(np.float32),
                 SAMPLING_RATE)
    speech = Recording.from_file(tmp / "speech.wav").to_cut()
    CutSet.from_cuts([Recording.from_file(tmp / "noise.wav").to_cut()]).to_file(tmp / "noise.jsonl.gz")
    mixer, fbank = MusanMixer(tmp / "noise.jsonl.gz", prob=1.0), lhotse_fbank()
    t0 = time.perf_counter()
    for e in range(repeats):
        cut = mixer(CutSet.from_cuts([speech]), epoch=e)[0]
        fbank.extract(cut.load_audio()[0], SAMPLING_RATE)
    mixed = 15.0 * repeats / (time.perf_counter() - t0)
    audio = speech.load_audio()[0]
    t0 = time.perf_counter()
    for _ in range(repeats):
        fbank.extract(audio, SAMPLING_RATE)
    alone = 15.0 * repeats / (time.perf_counter() - t0)
    return {"mixed_cut_audio_s_per_s": mixed, "fbank_alone_audio_s_per_s": alone}


def main(argv=None) -> int:
    args = get_parser().parse_args(argv)
    manifest = Path(args.manifest or f"/tmp/zpc_sampler_{args.cuts}.jsonl.gz")
    if args.one:
        b, buf = (int(x) for x in args.one.split(":"))
        print(json.dumps(run_one(str(manifest), b, buf, args)))
        return 0
    if not manifest.exists():
        t0 = time.perf_counter()
        tmp = manifest.with_name(manifest.name + ".part.jsonl.gz")
        generate(tmp, args.cuts, args.seed)
        tmp.rename(manifest)
        print(f"# generated {manifest} ({args.cuts} cuts, {manifest.stat().st_size / 2**20:.0f} MB) in "
              f"{time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    rows = []
    for cfg in [c for c in args.configs.split(",") if c]:
        cmd = [sys.executable, __file__, "--one", cfg, "--manifest", str(manifest), "--cuts", str(args.cuts),
               "--max-duration", str(args.max_duration), "--seed", str(args.seed)] + (["--scan"] if args.scan else [])
        r = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
        if r.returncode != 0:
            print(f"{cfg}: failed\n{r.stderr[-2000:]}", file=sys.stderr)
            return 1
        rows.append(json.loads(r.stdout.strip().splitlines()[-1]))
        print(f"# {cfg}: {rows[-1]['epoch_s']:.0f} s", file=sys.stderr, flush=True)
    print(f"\n{args.cuts} generated cuts without audio, --max-duration {args.max_duration:g}, one epoch of the "
          f"sampler alone (lazy manifest, shuffled)\n")
    scan = " OOM scan pass (s) |" if args.scan else ""
    print(f"| buckets | buffer (cuts) | first batch (s) | epoch (s) | peak memory (GB) | batches | "
          f"audio per batch (s) | padding |{scan}")
    print("|---|---|---|---|---|---|---|---|" + ("---|" if args.scan else ""))
    for r in rows:
        extra = f" {r['oom_scan_pass_s']:.0f} |" if args.scan else ""
        print(f"| {r['num_buckets']} | {r['buffer_size']} | {r['first_batch_s']:.1f} | {r['epoch_s']:.0f} | "
              f"{r['peak_memory_gb']:.2f} | {r['batches']} | {r['mean_batch_s']:.0f} | "
              f"{100 * r['padding']:.1f}% |{extra}")
    if args.fbank:
        f = mixed_fbank_speed()
        print(f"\nA MUSAN-mixed 15 s cut (read, mixed, fbank): {f['mixed_cut_audio_s_per_s']:.0f} s of audio per "
              f"second of one thread; the fbank alone: {f['fbank_alone_audio_s_per_s']:.0f}")
        rows.append(f)
    if args.out_json:
        Path(args.out_json).write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
