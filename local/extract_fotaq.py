#!/usr/bin/env python3
"""Extract the recorded English speech of "Flight of the Amazon Queen" as WAV files.

Source data
-----------
The freeware CD ("talkie") release shipped by Debian (package
``flight-of-the-amazon-queen``) contains a single resource file, ``queen.1c``.
It is the original ``queen.1`` rebuilt by ScummVM's ``compress_queen`` tool:
the resource table is stored inside the file and every ``.SB`` sound was
re-encoded.

Layout of a rebuilt ``queen.1c`` (all integers big-endian):

* bytes 0-3    the ASCII magic ``QTBL``
* bytes 4-9    game version string, NUL padded (``CEM10`` = CD, English, 1.0)
* byte  10     "is floppy" flag
* byte  11     "is demo" flag
* byte  12     audio codec of the ``.SB`` entries:
               0 = untouched, 1 = MP3, 2 = Ogg Vorbis, 3 = FLAC
* bytes 13-14  number of resource entries N (uint16)
* then N records of 21 bytes: 12-byte NUL-padded upper-case file name,
  1-byte bundle number (always 1 here), uint32 absolute offset of the data
  in this file, uint32 size in bytes.  The table is sorted by name.
* the data of all entries follows the table.

Every sound in the game is an ``.SB`` entry.  Speech and sound effects share
the extension; they differ only by name:

* sound effects are a number, an optional letter and ``S`` padding up to
  eight characters (``27SSSSSS``, ``116BSSSS``, ``1000SSSS``);
* dialogue lines are ``KKHHHHWN``: KK = the dialogue's key (decimal, one
  per ``.DOG`` dialogue file), HHHH = dialogue node (hex, or ``SSSS`` for
  Joe's opening line, ``XXXX`` for the line used on a repeat visit),
  W = who speaks (``J`` = Joe, the player character, ``P`` = the other
  person of that dialogue), N = sentence segment (hex, from 1);
* cut-scene lines are the cut-scene file's base name padded with ``_`` to
  five characters, the two-digit object index and the segment digit
  (``C12A_011`` = cut-scene C12A.CUT; also ``CDINT*``, ``CINTR*``,
  ``COMIC*``); the speaker is not encoded in these names;
* Joe's remarks outside dialogues are ``JOEnnnnN``; a handful of other
  names (``MIK_*``, ``TOM_*``, ``BLUEP*``, ...) are speech too.
Music is MIDI/AdLib data in other resource types, so it is never an ``.SB``.

In the uncompressed original an ``.SB`` entry is a 110-byte (version 104) or
122-byte (version 110) header followed by 8-bit unsigned mono PCM; the
version is the little-endian uint16 at byte 2 of the entry.  The true
playback rate of all PC sounds is 11840 Hz.  The rebuilt file stores each
entry as a complete MP3/Ogg/FLAC stream; older versions of the tool (as in
this 2004 Debian file, MPEG-2.5 layer III mono) declared 11025 Hz although
the samples are the 11840 Hz originals, so a stream that claims 11025 Hz is
written with 11840 Hz (same samples, corrected rate; ``--keep-header-rate``
turns this off).

This format description was learnt by reading ScummVM's ``engines/queen``
(``resource.cpp``, ``sound.cpp``, ``talk.cpp``, ``musicdata.cpp``) and
scummvm-tools' ``compress_queen`` (both GPL).  No code or tables were copied;
this is an independent implementation.

Compressed streams are decoded with ``soundfile`` (libsndfile >= 1.1 reads
MP3, Ogg Vorbis and FLAC).

Usage
-----
    python local/extract_fotaq.py --deb flight-of-the-amazon-queen_1.0.0-9_all.deb \\
        --output-dir /root/zpc/games/fotaq
    python local/extract_fotaq.py --game-dir DIR_WITH_QUEEN_1C --output-dir OUT --limit 5
"""

from __future__ import annotations

import argparse
import collections
import io
import logging
import math
import os
import re
import struct
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Tuple

import numpy as np
import soundfile as sf

# debs.py is this script's sibling: its folder is on sys.path when run as `python local/extract_fotaq.py`
import debs

from zipformer_pc.logs import setup_logging

log = logging.getLogger("extract_fotaq")

MAGIC = b"QTBL"
HEADER_SIZE = 15          # magic 4 + version 6 + floppy 1 + demo 1 + codec 1 + count 2
ENTRY_SIZE = 21           # name 12 + bundle 1 + offset 4 + size 4
ENTRY_STRUCT = struct.Struct(">12sBII")

CODECS = {0: "none", 1: "mp3", 2: "ogg", 3: "flac"}
SB_HEADER_BYTES = {104: 110, 110: 122}
PC_SOUND_RATE = 11840     # real playback rate of the PC .SB sounds
OLD_TOOL_RATE = 11025     # rate wrongly declared by old compress_queen builds

DATA_PATH_IN_DEB = "usr/share/scummvm/flight-of-the-amazon-queen/queen.1c"
GAME_FILE_NAMES = ("queen.1c", "QUEEN.1C")

SFX_NAME_RE = re.compile(r"^[0-9]+[A-Z]?S+$")


class FormatError(ValueError):
    """The resource file is not a rebuilt FOTAQ resource file."""


@dataclass(frozen=True)
class GameHeader:
    version: str
    floppy: bool
    demo: bool
    codec: int
    n_entries: int

    @property
    def codec_name(self) -> str:
        return CODECS.get(self.codec, f"unknown({self.codec})")


@dataclass(frozen=True)
class Entry:
    name: str      # e.g. "020001P2.SB"
    bundle: int
    offset: int
    size: int

    @property
    def stem(self) -> str:
        return self.name.rsplit(".", 1)[0]

    @property
    def ext(self) -> str:
        return self.name.rsplit(".", 1)[1].upper() if "." in self.name else ""


# --------------------------------------------------------------------------
# resource table
# --------------------------------------------------------------------------

def parse_header(data: bytes) -> GameHeader:
    if len(data) < HEADER_SIZE:
        raise FormatError(f"file too short for a header ({len(data)} bytes)")
    if data[:4] != MAGIC:
        raise FormatError(
            f"magic {data[:4]!r} != {MAGIC!r}: not a rebuilt queen.1c "
            "(an original queen.1 needs the external queen.tbl, not supported)")
    version = data[4:10].split(b"\0", 1)[0].decode("ascii", "replace")
    floppy, demo, codec = data[10], data[11], data[12]
    (n_entries,) = struct.unpack_from(">H", data, 13)
    return GameHeader(version, bool(floppy), bool(demo), codec, n_entries)


def parse_table(data: bytes) -> Tuple[GameHeader, List[Entry]]:
    """Parse header and resource table of a rebuilt queen.1c held in memory."""
    header = parse_header(data)
    table_end = HEADER_SIZE + header.n_entries * ENTRY_SIZE
    if table_end > len(data):
        raise FormatError(
            f"table of {header.n_entries} entries needs {table_end} bytes, "
            f"file has {len(data)}")
    entries = []
    for i in range(header.n_entries):
        raw_name, bundle, offset, size = ENTRY_STRUCT.unpack_from(
            data, HEADER_SIZE + i * ENTRY_SIZE)
        name = raw_name.split(b"\0", 1)[0].decode("ascii", "replace").strip()
        if not name:
            raise FormatError(f"entry {i} has an empty name")
        if offset < table_end or offset + size > len(data):
            raise FormatError(
                f"entry {name}: data [{offset}, {offset + size}) outside "
                f"the data area [{table_end}, {len(data)})")
        entries.append(Entry(name, bundle, offset, size))
    return header, entries


def classify(entry: Entry) -> str:
    """'speech', 'sfx' (sound effect) or 'other' (not a sound)."""
    if entry.ext != "SB":
        return "other"
    if SFX_NAME_RE.match(entry.stem.upper()):
        return "sfx"
    return "speech"


# --------------------------------------------------------------------------
# audio
# --------------------------------------------------------------------------

def decode_entry(blob: bytes, codec: int,
                 fix_rate: bool = True) -> Tuple[np.ndarray, int]:
    """Decode one .SB entry to (int16 mono samples, sample rate)."""
    if codec == 0:
        if len(blob) < 4:
            raise ValueError("raw .SB entry shorter than 4 bytes")
        (sb_version,) = struct.unpack_from("<H", blob, 2)
        skip = SB_HEADER_BYTES.get(sb_version, SB_HEADER_BYTES[104])
        pcm = np.frombuffer(blob[skip:], dtype=np.uint8)
        samples = ((pcm.astype(np.int16) - 128) << 8).astype(np.int16)
        return samples, PC_SOUND_RATE
    if codec not in CODECS:
        raise ValueError(f"unknown codec id {codec}")
    audio, rate = sf.read(io.BytesIO(blob), dtype="int16", always_2d=True)
    if audio.shape[1] > 1:
        audio = audio.astype(np.int32).mean(axis=1).round().astype(np.int16)
    else:
        audio = audio[:, 0]
    if fix_rate and rate == OLD_TOOL_RATE:
        rate = PC_SOUND_RATE
    return np.ascontiguousarray(audio), int(rate)


def rms_dbfs(samples: np.ndarray) -> float:
    if samples.size == 0:
        return -math.inf
    x = samples.astype(np.float64) / 32768.0
    rms = math.sqrt(float(np.mean(x * x)))
    return 20.0 * math.log10(rms) if rms > 0 else -math.inf


# --------------------------------------------------------------------------
# input
# --------------------------------------------------------------------------

def read_game_file_from_deb(deb: Path) -> bytes:
    try:
        path, data = debs.read_member(deb, lambda p: p.lower().endswith("/queen.1c"))
    except debs.DebError as e:
        raise FormatError(f"{e} (expected {DATA_PATH_IN_DEB})") from None
    log.info("found %s (%d bytes) in %s", path, len(data), deb.name)
    return data


def read_game_file_from_dir(game_dir: Path) -> bytes:
    candidates = [game_dir / n for n in GAME_FILE_NAMES]
    candidates.append(game_dir / DATA_PATH_IN_DEB)
    for c in candidates:
        if c.is_file():
            log.info("reading %s", c)
            return c.read_bytes()
    raise FileNotFoundError(f"no queen.1c in {game_dir}")


# --------------------------------------------------------------------------
# extraction
# --------------------------------------------------------------------------

def extract(data: bytes, output_dir: Path, limit: Optional[int] = None,
            min_dur: float = 0.3, max_dur: float = 30.0,
            min_rms_dbfs: float = -60.0, fix_rate: bool = True) -> Dict:
    header, entries = parse_table(data)
    log.info("version %s, codec %s, %d table entries", header.version,
             header.codec_name, len(entries))
    kinds = collections.Counter(classify(e) for e in entries)
    speech = [e for e in entries if classify(e) == "speech"]
    log.info("entries: %d speech .SB, %d sound-effect .SB, %d non-sound",
             kinds["speech"], kinds["sfx"], kinds["other"])
    if limit is not None:
        speech = speech[:limit]

    output_dir.mkdir(parents=True, exist_ok=True)
    wav_dir = output_dir / "wav"
    wav_dir.mkdir(exist_ok=True)

    skipped: collections.Counter = collections.Counter()
    rates: collections.Counter = collections.Counter()
    rows = []
    total_s = 0.0
    t0 = time.time()
    for i, entry in enumerate(speech, 1):
        blob = data[entry.offset:entry.offset + entry.size]
        try:
            samples, rate = decode_entry(blob, header.codec, fix_rate=fix_rate)
        except Exception as exc:  # noqa: BLE001 - log & count, never crash
            log.warning("%s: decode failed: %s", entry.name, exc)
            skipped["decode_error"] += 1
            continue
        dur = samples.size / rate if rate else 0.0
        if dur < min_dur:
            skipped["too_short"] += 1
            log.debug("%s: %.3f s < %.2f s, skipped", entry.name, dur, min_dur)
            continue
        if dur > max_dur:
            skipped["too_long"] += 1
            log.info("%s: %.2f s > %.1f s, skipped", entry.name, dur, max_dur)
            continue
        level = rms_dbfs(samples)
        if level < min_rms_dbfs:
            skipped["silent"] += 1
            log.info("%s: RMS %.1f dBFS < %.1f, skipped", entry.name, level,
                     min_rms_dbfs)
            continue
        utt_id = f"fotaq-{entry.stem.lower()}"
        path = wav_dir / f"{utt_id}.wav"
        try:
            sf.write(str(path), samples, rate, subtype="PCM_16")
        except Exception as exc:  # noqa: BLE001
            log.warning("%s: write failed: %s", path, exc)
            skipped["write_error"] += 1
            continue
        rows.append((utt_id, str(path.resolve()), f"{dur:.3f}", str(rate),
                     entry.name))
        rates[rate] += 1
        total_s += dur
        if i % 500 == 0:
            log.info("%d/%d entries processed, %d written (%.1f s)",
                     i, len(speech), len(rows), time.time() - t0)

    manifest = output_dir / "manifest.tsv"
    tmp = manifest.with_suffix(".tsv.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write("id\tpath\tduration_s\tsample_rate\tresource_name\n")
        for row in rows:
            f.write("\t".join(row) + "\n")
    os.replace(tmp, manifest)

    summary = {
        "entries": len(entries),
        "speech_entries": kinds["speech"],
        "sfx_entries": kinds["sfx"],
        "other_entries": kinds["other"],
        "processed": len(speech),
        "written": len(rows),
        "skipped": dict(skipped),
        "hours": total_s / 3600.0,
        "sample_rates": dict(rates),
        "manifest": str(manifest),
    }
    skipped_txt = ", ".join(f"{k}={v}" for k, v in sorted(skipped.items())) or "none"
    log.info("SUMMARY: %d table entries (%d speech, %d sfx, %d other); "
             "processed %d, written %d, skipped: %s; total %.3f h; rates %s; "
             "manifest %s",
             len(entries), kinds["speech"], kinds["sfx"], kinds["other"],
             len(speech), len(rows), skipped_txt, summary["hours"],
             dict(rates), manifest)
    return summary


def main(argv: Optional[Iterable[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--deb", type=Path,
                     help="flight-of-the-amazon-queen_*.deb")
    src.add_argument("--game-dir", type=Path,
                     help="directory holding queen.1c (or an unpacked .deb root)")
    ap.add_argument("--output-dir", type=Path, required=True)
    ap.add_argument("--limit", type=int, default=None,
                    help="only process the first N speech entries")
    ap.add_argument("--min-duration", type=float, default=0.3)
    ap.add_argument("--max-duration", type=float, default=30.0)
    ap.add_argument("--min-rms-dbfs", type=float, default=-60.0,
                    help="skip (digitally) silent clips below this RMS level")
    ap.add_argument("--keep-header-rate", action="store_true",
                    help="do not relabel 11025 Hz streams as 11840 Hz")
    ap.add_argument("--log-level", default="INFO")
    args = ap.parse_args(list(argv) if argv is not None else None)
    setup_logging(args.log_level)
    try:
        data = (read_game_file_from_deb(args.deb) if args.deb
                else read_game_file_from_dir(args.game_dir))
        extract(data, args.output_dir, limit=args.limit,
                min_dur=args.min_duration, max_dur=args.max_duration,
                min_rms_dbfs=args.min_rms_dbfs,
                fix_rate=not args.keep_header_rate)
    except (FormatError, FileNotFoundError) as exc:
        log.error("%s", exc)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
