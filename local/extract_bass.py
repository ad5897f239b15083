#!/usr/bin/env python3
"""Extract the recorded English speech of "Beneath a Steel Sky" as WAV files.

Source data
-----------
The freeware CD release (v0.0372) shipped by Debian (package
``beneath-a-steel-sky``) keeps every resource of the game in one data file,
``sky.dsk``, indexed by a directory file, ``sky.dnr``.  (``sky.cpt`` holds the
game's object data and is not needed here.)

``sky.dnr`` (all integers little-endian):

* uint32 N, the number of entries (5097 in v0.0372, 5099 in v0.0368);
* then N records of 8 bytes:
    - uint16 file number.  Numbers are grouped in sections of 2048
      (``number >> 11``); speech lives at 50000 and up;
    - 24-bit location.  The low 23 bits are the byte offset into
      ``sky.dsk``; when bit 23 is set that value counts 16-byte units
      (8-byte units in v0.0331) and must be scaled up;
    - 24-bit size word.  The low 22 bits are the stored size in bytes;
      bit 22 set means "the unpacked file does not keep its 22-byte header";
      bit 23 set means "stored as is, never packed".

A stored file starts with a 22-byte header of eleven uint16 words.  Word 0 is
a flag word: bit 7 set means the rest of the file is packed; its high byte
then gives bits 16-23 of the unpacked size, whose low 16 bits are word 6.
The packed body is a Rob Northen "RNC" method-1 stream (below); the unpacked
file is the 22 header bytes (unless bit 22 above) followed by that stream's
output.

Speech: an in-game line has a 16-bit text number, ``section << 12 | line``
(eight sections, one per part of the game).  Its recording is file number
``50000 + first[section] + line`` where ``first`` is the running sum of fixed
per-section budgets 600, 500, 1330, 950, 1150, 550, 150 (so section 0 starts
at 50000, section 1 at 50600, ..., section 7 at 55230); numbers for which no
line was recorded are simply absent from the directory.  The CD intro's
narration is stored separately at 59500-59672, interleaved with the intro's
pictures, palettes and animations, and preceded by a few background noises
(59494-59499: helicopter, fire crackle).  A speech file's payload (after the
22-byte header) is 8-bit unsigned mono PCM at 11025 Hz.  So every entry
numbered 50000-59999 is a candidate; one is kept as speech when it unpacks to
PCM that looks like audio (see ``audio_problem``) and it is not one of the
intro's background noises.

RNC method 1 (``RNC\\x01``):

* an 18-byte header, big-endian: magic, uint32 unpacked size, uint32 packed
  size, uint16 CRC of the unpacked data, uint16 CRC of the packed data, one
  "leeway" byte, one byte with the number of chunks;
* then a bit stream read least-significant bit first out of little-endian
  16-bit words, with raw bytes spliced in: the reader loads 16-bit words only
  when it runs out of bits, and a run of literal bytes is taken from the byte
  position of the next word not yet loaded.  The stream starts with 2 flag
  bits (ignored).  Each chunk: three Huffman tables (literal-run lengths,
  match distances, match lengths), each as a 5-bit symbol count and a 4-bit
  code length per symbol (0 = unused), canonical codes assigned by length and
  then symbol order, and stored bit-reversed; then a 16-bit count of steps.
  A step is a literal run (copy that many raw bytes) and, except in the
  chunk's last step, a match (copy ``length + 2`` bytes from ``distance + 1``
  bytes back).  A Huffman symbol s is a number itself when s < 2, else the
  number ``2**(s-1) + (s-1 further bits)``.
* both CRCs are CRC-16 with the reflected polynomial 0xA001 and start value 0.

The text of the lines is Huffman-coded with trees that ship in the game
executable (ScummVM carries them as data tables), not in these files, so it is
not decoded here; ``text_id`` in the manifest is the game's text number.

This format description was learnt by reading ScummVM's ``engines/sky``
(``disk.cpp``, ``rnc_deco.cpp``, ``sound.cpp``, ``intro.cpp``, ``struc.h``;
GPL).  No code or tables were copied; this is an independent implementation.

Output
------
``bass-<fileno>.wav`` (16-bit mono, 11025 Hz) for each speech file between
0.3 s and 30 s, and ``manifest.tsv`` with columns
``id  path  duration_s  sample_rate  text_id`` (text_id empty for the intro).

Usage
-----
    python local/extract_bass.py --deb beneath-a-steel-sky_0.0372-8_all.deb \\
        --output-dir /root/zpc/games/bass
    python local/extract_bass.py --game-dir DIR_WITH_SKY_DNR --output-dir OUT --limit 5
"""

from __future__ import annotations

import argparse
import collections
import logging
import struct
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

# debs.py is this script's sibling: its folder is on sys.path when run as `python local/extract_bass.py`
import debs

from zipformer_pc.logs import setup_logging

log = logging.getLogger("extract_bass")

SAMPLE_RATE = 11025
HEADER_SIZE = 22  # eleven uint16 words in front of every stored file
DEB_GAME_DIR = "usr/share/scummvm/beneath-a-steel-sky"

SPEECH_FIRST = 50000  # in-game lines: 50000 + first[section] + line
INTRO_FIRST = 59000  # CD intro narration lives in 59xxx
CANDIDATES_END = 60000  # 60000 and up: pictures, fonts, text
# file-number budget of each of the eight text sections, as running starts
_SECTION_BUDGETS = (600, 500, 1330, 950, 1150, 550, 150)
SECTION_STARTS = tuple(sum(_SECTION_BUDGETS[:i]) for i in range(len(_SECTION_BUDGETS) + 1))
INTRO_NOISES = range(59494, 59500)  # helicopter and fire sounds under the intro


# --------------------------------------------------------------------------------------
# CRC-16 (reflected polynomial 0xA001, start 0)


def _crc_table() -> List[int]:
    table = []
    for byte in range(256):
        value = byte
        for _ in range(8):
            value = (value >> 1) ^ 0xA001 if value & 1 else value >> 1
        table.append(value)
    return table


_CRC_TABLE = _crc_table()


def crc16(data: bytes) -> int:
    crc = 0
    table = _CRC_TABLE
    for b in data:
        crc = (crc >> 8) ^ table[(crc ^ b) & 0xFF]
    return crc


# --------------------------------------------------------------------------------------
# RNC method 1


class RncError(ValueError):
    """A stream that is not RNC method 1, or is truncated or corrupt."""


RNC_MAGIC = b"RNC\x01"
RNC_HEADER_SIZE = 18


class _Bits:
    """LSB-first reader over little-endian 16-bit words that loads a word only when it
    runs out of bits; raw bytes are taken from where the next word would be loaded."""

    __slots__ = ("data", "pos", "buf", "count")

    def __init__(self, data: bytes):
        self.data = data
        self.pos = 0  # byte offset of the next word not yet loaded
        self.buf = 0  # loaded bits not yet used, next one in bit 0
        self.count = 0  # how many bits of buf are valid

    def _word(self, at: int) -> int:
        d = self.data
        return (d[at] if at < len(d) else 0) | ((d[at + 1] if at + 1 < len(d) else 0) << 8)

    def read(self, n: int) -> int:
        while self.count < n:
            self.buf |= self._word(self.pos) << self.count
            self.pos += 2
            self.count += 16
        value = self.buf & ((1 << n) - 1)
        self.buf >>= n
        self.count -= n
        return value

    def peek16(self) -> int:
        """The next 16 bits, without loading anything (the stream may end sooner)."""
        value = self.buf
        count, at = self.count, self.pos
        while count < 16:
            value |= self._word(at) << count
            at += 2
            count += 16
        return value & 0xFFFF

    def raw(self, n: int) -> bytes:
        if self.pos + n > len(self.data):
            raise RncError("literal run past the end of the packed data")
        chunk = self.data[self.pos:self.pos + n]
        self.pos += n
        return chunk


# A Huffman table: [(length, {reversed code: symbol}), ...] by increasing length.
_Table = List[Tuple[int, Dict[int, int]]]


def _read_table(bits: _Bits, previous: _Table) -> _Table:
    n = bits.read(5)
    if n == 0:
        return previous  # an empty table keeps the previous chunk's
    if n > 16:
        raise RncError(f"Huffman table with {n} symbols (at most 16)")
    lengths = [bits.read(4) for _ in range(n)]
    table: _Table = []
    code = 0  # canonical code, left-aligned in 16 bits
    for length in range(1, 17):
        codes: Dict[int, int] = {}
        for symbol, sym_len in enumerate(lengths):
            if sym_len != length:
                continue
            if code >> 16:
                raise RncError("over-subscribed Huffman table")
            msb_first = code >> (16 - length)
            lsb_first = int(format(msb_first, f"0{length}b")[::-1], 2)
            codes[lsb_first] = symbol
            code += 1 << (16 - length)
        if codes:
            table.append((length, codes))
    return table


def _read_value(bits: _Bits, table: _Table) -> int:
    window = bits.peek16()
    for length, codes in table:
        symbol = codes.get(window & ((1 << length) - 1))
        if symbol is not None:
            bits.read(length)
            if symbol < 2:
                return symbol
            return (1 << (symbol - 1)) | bits.read(symbol - 1)
    raise RncError("no Huffman code matches the stream")


def rnc_unpack(stream: bytes, check_crc: bool = True) -> bytes:
    """Unpack an RNC method-1 stream (header included) and return the unpacked bytes."""
    if len(stream) < RNC_HEADER_SIZE or stream[:4] != RNC_MAGIC:
        raise RncError("not an RNC method-1 stream")
    unpacked_size, packed_size, crc_unpacked, crc_packed = struct.unpack_from(">IIHH", stream, 4)
    n_chunks = stream[17]
    packed = bytes(stream[RNC_HEADER_SIZE:RNC_HEADER_SIZE + packed_size])
    if len(packed) < packed_size:
        raise RncError(f"truncated: {len(packed)} of {packed_size} packed bytes")
    if check_crc and crc16(packed) != crc_packed:
        raise RncError("CRC of the packed data does not match")

    bits = _Bits(packed)
    out = bytearray()
    bits.read(2)  # lock / key flags
    raw_t: _Table = []
    dist_t: _Table = []
    len_t: _Table = []
    for _ in range(n_chunks):
        raw_t = _read_table(bits, raw_t)
        dist_t = _read_table(bits, dist_t)
        len_t = _read_table(bits, len_t)
        steps = bits.read(16)
        for step in range(steps):
            run = _read_value(bits, raw_t)
            if run:
                out += bits.raw(run)
                if len(out) > unpacked_size:
                    raise RncError("unpacks to more than the declared size")
            if step == steps - 1:
                break
            distance = _read_value(bits, dist_t) + 1
            length = _read_value(bits, len_t) + 2
            start = len(out) - distance
            if start < 0:
                raise RncError("match reaches before the start of the output")
            if len(out) + length > unpacked_size:
                raise RncError("unpacks to more than the declared size")
            if distance >= length:
                out += out[start:start + length]
            else:  # overlapping copy repeats the last `distance` bytes
                pattern = bytes(out[start:])
                reps, rest = divmod(length, distance)
                out += pattern * reps + pattern[:rest]
    if len(out) != unpacked_size:
        raise RncError(f"unpacked {len(out)} bytes, header says {unpacked_size}")
    if check_crc and crc16(out) != crc_unpacked:
        raise RncError("CRC of the unpacked data does not match")
    return bytes(out)


# --------------------------------------------------------------------------------------
# sky.dnr / sky.dsk


@dataclass(frozen=True)
class DnrEntry:
    file_no: int
    offset: int  # byte offset in sky.dsk
    size: int  # stored bytes
    drop_header: bool  # the unpacked file leaves out the 22-byte header
    stored_raw: bool  # never packed


def parse_dnr(data: bytes, offset_shift: int = 4) -> List[DnrEntry]:
    """Parse the directory. ``offset_shift`` scales the flagged offsets (3 for v0.0331)."""
    if len(data) < 4:
        raise ValueError("sky.dnr: too short for the entry count")
    (n,) = struct.unpack_from("<I", data, 0)
    if n == 0 or 4 + 8 * n > len(data):
        raise ValueError(f"sky.dnr: {n} entries do not fit in {len(data)} bytes")
    entries = []
    for i in range(n):
        at = 4 + 8 * i
        file_no = data[at] | data[at + 1] << 8
        loc = int.from_bytes(data[at + 2:at + 5], "little")
        size_word = int.from_bytes(data[at + 5:at + 8], "little")
        offset = loc & 0x7FFFFF
        if loc & 0x800000:
            offset <<= offset_shift
        entries.append(DnrEntry(file_no=file_no, offset=offset, size=size_word & 0x3FFFFF,
                                drop_header=bool(size_word & 0x400000),
                                stored_raw=bool(size_word & 0x800000)))
    return entries


def load_file(dsk: bytes, entry: DnrEntry, check_crc: bool = True) -> bytes:
    """The unpacked contents of one file (header included unless the entry drops it)."""
    stored = dsk[entry.offset:entry.offset + entry.size]
    if len(stored) < entry.size:
        raise ValueError(f"file {entry.file_no}: past the end of sky.dsk")
    if entry.stored_raw or len(stored) < HEADER_SIZE:
        return bytes(stored)
    flag, tot_size = struct.unpack_from("<H10xH", stored, 0)  # words 0 and 6
    if not (flag >> 7) & 1 or stored[HEADER_SIZE:HEADER_SIZE + 4] != RNC_MAGIC:
        return bytes(stored)
    body = rnc_unpack(stored[HEADER_SIZE:], check_crc=check_crc)
    data = body if entry.drop_header else bytes(stored[:HEADER_SIZE]) + body
    declared = ((flag & 0xFF00) << 8) | tot_size  # size of the unpacked file
    if declared != len(data):
        log.debug("file %d: header says %d bytes, unpacked %d", entry.file_no, declared, len(data))
    return data


def text_id_of(file_no: int) -> Optional[int]:
    """The game's text number (section << 12 | line) of an in-game speech file."""
    rel = file_no - SPEECH_FIRST
    if rel < 0 or file_no >= INTRO_FIRST:
        return None
    section = max(i for i, start in enumerate(SECTION_STARTS) if start <= rel)
    line = rel - SECTION_STARTS[section]
    if line > 0xFFF:
        return None
    return section << 12 | line


def pcm_u8_to_int16(payload: bytes) -> np.ndarray:
    return ((np.frombuffer(payload, dtype=np.uint8).astype(np.int16) - 128) << 8).astype(np.int16)


def audio_problem(samples: np.ndarray) -> Optional[str]:
    """Why 8-bit PCM (as int16) does not look like recorded speech, or None.

    Recorded speech centres on silence (byte 128): its median byte is within a few steps
    of 128 and a good share of its bytes lie close to it (in this game at least 0.2 of
    them within 16 steps).  Pictures, palettes and animation data are mostly small pixel
    or colour values (median far below 128) or spread over all 256 values."""
    if samples.size == 0:
        return "empty"
    s = samples.astype(np.int32) >> 8
    near_silence = float(np.mean(np.abs(s) <= 16))
    if near_silence < 0.15 or abs(float(np.median(s))) > 6:
        return "not_pcm"
    if int(np.max(np.abs(s))) <= 2:
        return "silent"
    return None


# --------------------------------------------------------------------------------------
# extraction


@dataclass
class Extracted:
    file_no: int
    path: Path
    duration: float
    text_id: Optional[int]
    rms_dbfs: float
    peak: float


def locate_game(deb: Optional[str], game_dir: Optional[str], tmp: Path) -> Path:
    if game_dir:
        return Path(game_dir)
    debs.unpack(Path(deb), tmp)
    return tmp / DEB_GAME_DIR


def candidates(entries: Sequence[DnrEntry]) -> List[DnrEntry]:
    return sorted((e for e in entries if SPEECH_FIRST <= e.file_no < CANDIDATES_END), key=lambda e: e.file_no)


def extract(game: Path, out_dir: Path, limit: Optional[int] = None, min_s: float = 0.3,
            max_s: float = 30.0) -> Tuple[List[Extracted], collections.Counter, int, int]:
    """Write the speech files of the game in ``game`` to ``out_dir``.

    Returns (written, skipped reasons, candidate files found, candidates looked at);
    with ``limit`` the scan stops once that many files were written."""
    import soundfile as sf

    dnr = (game / "sky.dnr").read_bytes()
    dsk = (game / "sky.dsk").read_bytes()
    entries = parse_dnr(dnr)
    log.info("sky.dnr: %d entries; sky.dsk: %.1f MB", len(entries), len(dsk) / 1e6)
    found = candidates(entries)
    log.info("%d candidate speech files (numbers %d-%d)", len(found), SPEECH_FIRST, CANDIDATES_END - 1)
    out_dir.mkdir(parents=True, exist_ok=True)
    written: List[Extracted] = []
    skipped: collections.Counter = collections.Counter()
    t0 = time.time()
    seen = 0
    for entry in found:
        if limit is not None and len(written) >= limit:
            break
        seen += 1
        if seen % 250 == 0:
            log.info("%d/%d files looked at, %d written (%.0f s)", seen, len(found), len(written),
                     time.time() - t0)
        if entry.file_no in INTRO_NOISES:
            skipped["not_speech"] += 1
            continue
        try:
            data = load_file(dsk, entry)
        except (RncError, ValueError) as e:
            log.warning("file %d: cannot unpack: %s", entry.file_no, e)
            skipped["unpack_error"] += 1
            continue
        payload = data if entry.drop_header else data[HEADER_SIZE:]
        samples = pcm_u8_to_int16(payload)
        problem = audio_problem(samples)
        if problem:
            skipped["not_speech" if problem in ("not_pcm", "empty") else problem] += 1
            log.debug("file %d: skipped (%s)", entry.file_no, problem)
            continue
        duration = samples.size / SAMPLE_RATE
        if not min_s <= duration <= max_s:
            reason = "too_short" if duration < min_s else "too_long"
            skipped[reason] += 1
            log.debug("file %d: skipped (%s, %.2f s)", entry.file_no, reason, duration)
            continue
        path = out_dir / f"bass-{entry.file_no}.wav"
        sf.write(str(path), samples, SAMPLE_RATE, subtype="PCM_16")
        x = samples.astype(np.float64) / 32768.0
        rms = float(np.sqrt(np.mean(x * x)))
        written.append(Extracted(entry.file_no, path, duration, text_id_of(entry.file_no),
                                 20 * np.log10(max(rms, 1e-9)), float(np.max(np.abs(x)))))
    return written, skipped, len(found), seen


def write_manifest(out_dir: Path, items: Sequence[Extracted]) -> Path:
    path = out_dir / "manifest.tsv"
    with open(path, "w", encoding="utf-8") as f:
        f.write("id\tpath\tduration_s\tsample_rate\ttext_id\n")
        for it in items:
            text_id = "" if it.text_id is None else str(it.text_id)
            f.write(f"bass-{it.file_no}\t{it.path.resolve()}\t{it.duration:.3f}\t{SAMPLE_RATE}\t{text_id}\n")
    return path


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--deb", help="the Debian package beneath-a-steel-sky_*.deb")
    src.add_argument("--game-dir", help="a directory holding sky.dnr and sky.dsk")
    p.add_argument("--output-dir", required=True, help="where the WAVs and manifest.tsv go")
    p.add_argument("--limit", type=int, default=None, help="stop after writing this many files")
    p.add_argument("--min-duration", type=float, default=0.3)
    p.add_argument("--max-duration", type=float, default=30.0)
    p.add_argument("-v", "--verbose", action="store_true")
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = get_parser().parse_args(argv)
    setup_logging("DEBUG" if args.verbose else "INFO")
    out_dir = Path(args.output_dir)
    with tempfile.TemporaryDirectory(prefix="bass-deb-") as tmp:
        try:
            game = locate_game(args.deb, args.game_dir, Path(tmp))
        except (debs.DebError, OSError) as e:
            log.error("%s", e)
            return 1
        if not (game / "sky.dnr").is_file() or not (game / "sky.dsk").is_file():
            log.error("no sky.dnr / sky.dsk in %s", game)
            return 1
        t0 = time.time()
        written, skipped, n_found, seen = extract(game, out_dir, args.limit, args.min_duration, args.max_duration)
    manifest = write_manifest(out_dir, written)
    hours = sum(w.duration for w in written) / 3600
    n_text = sum(w.text_id is not None for w in written)
    log.info("wrote %s (%d rows, %d with a text_id)", manifest, len(written), n_text)
    reasons = ", ".join(f"{k}={v}" for k, v in sorted(skipped.items())) or "none"
    log.info("summary: files found=%d, looked at=%d, written=%d, skipped=%d (%s), total hours=%.3f, "
             "sample rate=%d Hz, %.0f s", n_found, seen, len(written),
             sum(skipped.values()), reasons, hours, SAMPLE_RATE, time.time() - t0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
