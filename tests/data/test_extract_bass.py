"""local/extract_bass.py: the RNC method-1 unpacker and the sky.dnr/sky.dsk reader on tiny
streams built here (a small RNC packer below writes them), and, when the Debian package
is present, a 5-file extraction of the real game."""

import os
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import local_module

ROOT = Path(__file__).resolve().parents[2]
# the package prepare.sh --dataset games fetches (DL_DIR/games; $ZPC_GAMES_DIR overrides), if it is here
_GAMES = Path(os.environ.get("ZPC_GAMES_DIR", str(ROOT / "download" / "games")))
DEB = next(iter(sorted(_GAMES.glob("beneath-a-steel-sky_*.deb"))), _GAMES / "beneath-a-steel-sky.deb")

eb = local_module("extract_bass")


# ---------------------------------------------------------------------------------------
# a minimal RNC method-1 packer (the reverse of the format the docstring describes)


def crc16_bitwise(data: bytes) -> int:
    crc = 0
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ 0xA001 if crc & 1 else crc >> 1
    return crc


class BitWriter:
    """Bits go LSB first into little-endian 16-bit words, a word being opened only when a
    bit needs it; raw bytes go after the last opened word."""

    def __init__(self):
        self.out = bytearray()
        self.word_at = None  # where the open word is
        self.used = 16  # bits used in it

    def bit(self, b: int):
        if self.used == 16:
            self.word_at = len(self.out)
            self.out += b"\0\0"
            self.used = 0
        if b:
            value = self.out[self.word_at] | self.out[self.word_at + 1] << 8
            value |= 1 << self.used
            self.out[self.word_at:self.word_at + 2] = bytes([value & 0xFF, value >> 8])
        self.used += 1

    def bits(self, value: int, n: int):
        for i in range(n):
            self.bit((value >> i) & 1)

    def raw(self, data: bytes):
        self.out += data


def canonical_codes(lengths):
    """symbol -> (code, length): codes counted up in (length, symbol) order."""
    codes, code, prev = {}, 0, 0
    for length, sym in sorted((l, s) for s, l in enumerate(lengths) if l):
        code <<= length - prev
        codes[sym] = (code, length)
        code += 1
        prev = length
    return codes


LENGTHS = [2, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 5, 5, 6, 6, 6]  # a valid, non-uniform prefix code


def write_table(w: BitWriter, lengths):
    w.bits(len(lengths), 5)
    for l in lengths:
        w.bits(l, 4)


def write_value(w: BitWriter, codes, value: int):
    sym = value if value < 2 else value.bit_length()
    code, length = codes[sym]
    for i in reversed(range(length)):  # the code's first bit (its MSB) comes first
        w.bit((code >> i) & 1)
    if sym >= 2:
        w.bits(value - (1 << (sym - 1)), sym - 1)


def rnc_pack(chunks, unpacked: bytes, corrupt_crc: bool = False) -> bytes:
    """chunks: list of chunks, each a list of steps (literal bytes, (distance, length) or None);
    the last step of a chunk has None."""
    w = BitWriter()
    w.bits(0, 2)
    codes = canonical_codes(LENGTHS)
    for steps in chunks:
        for _ in range(3):
            write_table(w, LENGTHS)
        w.bits(len(steps), 16)
        for literal, match in steps:
            write_value(w, codes, len(literal))
            w.raw(literal)
            if match is not None:
                distance, length = match
                write_value(w, codes, distance - 1)
                write_value(w, codes, length - 2)
    packed = bytes(w.out)
    crc_u = crc16_bitwise(unpacked) ^ (1 if corrupt_crc else 0)
    header = b"RNC\x01" + struct.pack(">IIHH", len(unpacked), len(packed), crc_u, crc16_bitwise(packed))
    return header + bytes([0, len(chunks)]) + packed


# ---------------------------------------------------------------------------------------


def test_crc16_known_value():
    assert eb.crc16(b"123456789") == 0xBB3D  # CRC-16/ARC check value
    assert eb.crc16(b"") == 0


def test_rnc_literals_only():
    data = bytes(range(200))
    stream = rnc_pack([[(data, None)]], data)
    assert eb.rnc_unpack(stream) == data


def expand(chunks) -> bytes:
    """What the steps unpack to, copied byte by byte."""
    out = bytearray()
    for steps in chunks:
        for literal, match in steps:
            out += literal
            if match is not None:
                distance, length = match
                for _ in range(length):
                    out.append(out[-distance])
    return bytes(out)


def test_rnc_matches_overlaps_and_chunks():
    first = [(b"abc", (3, 8))]  # overlapping match: "abc" repeated
    assert expand([first + [(b"", None)]]) == b"abcabcabcab"
    chunks = [
        first + [(b"XYZ", (14, 5)), (b"Q", None)],  # 5 bytes from the very start
        [(b"", (4, 6)), (b"0123456789" * 3, (1, 9)), (b"!", None)],  # a chunk starting with a match
    ]
    data = expand(chunks)
    assert data == b"abcabcabcabXYZabcabQ" + b"cabQca" + b"0123456789" * 3 + b"9" * 9 + b"!"
    assert eb.rnc_unpack(rnc_pack(chunks, data)) == data


def test_rnc_long_values_use_extra_bits():
    lit = bytes((i * 7) & 0xFF for i in range(3000))  # a 3000-byte run: symbol 12 + 11 bits
    data = lit + lit[:1000]
    stream = rnc_pack([[(lit, (3000, 1000)), (b"", None)]], data)
    assert eb.rnc_unpack(stream) == data


def test_rnc_rejects_bad_input():
    data = b"hello hello hello"
    good = rnc_pack([[(b"hello ", (6, 11)), (b"", None)]], data)
    assert eb.rnc_unpack(good) == data
    with pytest.raises(eb.RncError):
        eb.rnc_unpack(b"RNC\x02" + good[4:])  # method 2
    with pytest.raises(eb.RncError):
        eb.rnc_unpack(good[:-3])  # truncated
    with pytest.raises(eb.RncError):
        eb.rnc_unpack(rnc_pack([[(b"hello ", (6, 11)), (b"", None)]], data, corrupt_crc=True))
    flipped = bytearray(good)
    flipped[20] ^= 0x40
    with pytest.raises(eb.RncError):
        eb.rnc_unpack(bytes(flipped))  # packed CRC


# ---------------------------------------------------------------------------------------
# sky.dnr / sky.dsk


def dnr_record(file_no, offset, size, *, scaled=False, drop_header=False, raw=False):
    loc = (offset >> 4 if scaled else offset) | (0x800000 if scaled else 0)
    word = size | (0x400000 if drop_header else 0) | (0x800000 if raw else 0)
    return struct.pack("<H", file_no) + loc.to_bytes(3, "little") + word.to_bytes(3, "little")


def packed_file(body: bytes) -> bytes:
    total = 22 + len(body)
    flag = 0x0081 | ((total >> 16) << 8)
    header = struct.pack("<11H", flag, 0, 0, 0, 0, 0, total & 0xFFFF, 0, 0, 0, 0)
    return header + rnc_pack([[(body, None)]], body)


def test_directory_and_files():
    speech = bytes([128, 130, 140, 120, 110, 128] * 20)
    raw_file = b"plain bytes, never packed"
    dsk = bytearray(b"\xee" * 5)
    off_raw = len(dsk)
    dsk += raw_file
    dsk += b"\0" * (-len(dsk) % 16)
    off_packed = len(dsk)  # 16-aligned: stored as a scaled offset
    p1 = packed_file(speech)
    dsk += p1
    off_nohdr = len(dsk)
    p2 = packed_file(b"no header kept")
    dsk += p2
    dnr = struct.pack("<I", 3) + dnr_record(60001, off_raw, len(raw_file), raw=True) \
        + dnr_record(50613, off_packed, len(p1), scaled=True) \
        + dnr_record(4096, off_nohdr, len(p2), drop_header=True)

    entries = eb.parse_dnr(dnr)
    assert [e.file_no for e in entries] == [60001, 50613, 4096]
    assert entries[0] == eb.DnrEntry(60001, off_raw, len(raw_file), False, True)
    assert entries[1].offset == off_packed and not entries[1].stored_raw
    assert entries[2].drop_header

    assert eb.load_file(bytes(dsk), entries[0]) == raw_file
    unpacked = eb.load_file(bytes(dsk), entries[1])
    assert unpacked[:22] == p1[:22] and unpacked[22:] == speech
    assert eb.load_file(bytes(dsk), entries[2]) == b"no header kept"
    assert [e.file_no for e in eb.candidates(entries)] == [50613]

    with pytest.raises(ValueError):
        eb.parse_dnr(struct.pack("<I", 5) + dnr[4:])  # more entries than bytes


def test_text_ids_and_audio_check():
    assert eb.text_id_of(50007) == 7
    assert eb.text_id_of(50613) == (1 << 12) | 13
    assert eb.text_id_of(55230) == 7 << 12
    assert eb.text_id_of(59500) is None and eb.text_id_of(49999) is None
    t = np.arange(11025) / 11025
    voice = (np.sin(2 * np.pi * 200 * t) * 60 + 128).astype(np.uint8).tobytes()
    assert eb.audio_problem(eb.pcm_u8_to_int16(voice)) is None
    picture = bytes(np.random.default_rng(0).integers(0, 60, 5000, dtype=np.uint8))
    assert eb.audio_problem(eb.pcm_u8_to_int16(picture)) == "not_pcm"
    assert eb.audio_problem(eb.pcm_u8_to_int16(bytes([128, 129] * 500))) == "silent"


@pytest.mark.slow
@pytest.mark.skipif(not DEB.exists(), reason=f"{DEB} not present")
def test_extract_five_from_deb(tmp_path):
    import soundfile as sf

    r = subprocess.run([sys.executable, str(ROOT / "local" / "extract_bass.py"), "--deb", str(DEB),
                        "--output-dir", str(tmp_path), "--limit", "5"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "summary:" in r.stderr and "written=5" in r.stderr
    rows = (tmp_path / "manifest.tsv").read_text().splitlines()
    assert rows[0].split("\t") == ["id", "path", "duration_s", "sample_rate", "text_id"]
    assert len(rows) == 6
    for row in rows[1:]:
        id_, path, dur, rate, text_id = row.split("\t")
        info = sf.info(path)
        assert info.samplerate == int(rate) == 11025 and info.channels == 1 and info.subtype == "PCM_16"
        assert abs(info.duration - float(dur)) < 0.01 and 0.3 <= float(dur) <= 30
        assert id_ == Path(path).stem and text_id.isdigit()
