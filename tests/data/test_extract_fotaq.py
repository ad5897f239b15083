"""local/extract_fotaq.py: the rebuilt queen.1c table parser and the speech extraction,
on tiny resource files built here (no game data needed), plus one slow test on the
real Debian package when it is present."""

import csv
import io
import os
import struct
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from conftest import local_module

ROOT = Path(__file__).resolve().parents[2]

fx = local_module("extract_fotaq")

# the package prepare.sh --dataset games fetches (DL_DIR/games; $ZPC_GAMES_DIR overrides), if it is here
_GAMES = Path(os.environ.get("ZPC_GAMES_DIR", str(ROOT / "download" / "games")))
DEB = next(iter(sorted(_GAMES.glob("flight-of-the-amazon-queen_*.deb"))), _GAMES / "flight-of-the-amazon-queen.deb")


def build_queen_1c(entries, codec=0, version=b"CEM10"):
    """A rebuilt resource file: ``entries`` is a list of (name, payload bytes)."""
    table_len = fx.HEADER_SIZE + fx.ENTRY_SIZE * len(entries)
    head = b"QTBL" + version.ljust(6, b"\0") + bytes([0, 0, codec])
    head += struct.pack(">H", len(entries))
    table, blobs, offset = b"", b"", table_len
    for name, payload in entries:
        table += struct.pack(">12sBII", name.encode("ascii"), 1, offset, len(payload))
        blobs += payload
        offset += len(payload)
    assert len(head) == fx.HEADER_SIZE
    return head + table + blobs


def raw_sb(seconds, rate=fx.PC_SOUND_RATE, version=104, freq=220.0):
    """An uncompressed .SB: header (version at byte 2) + 8-bit unsigned PCM."""
    header = bytearray(fx.SB_HEADER_BYTES[version])
    struct.pack_into("<H", header, 2, version)
    t = np.arange(int(seconds * rate)) / rate
    pcm = (128 + 100 * np.sin(2 * np.pi * freq * t)).astype(np.uint8)
    return bytes(header) + pcm.tobytes()


def test_parse_table_reads_header_and_entries():
    data = build_queen_1c([("020001P2.SB", b"abc"), ("27SSSSSS.SB", b"de"),
                           ("QUEEN.JAS", b"fghij")], codec=1)
    header, entries = fx.parse_table(data)
    assert header.version == "CEM10" and header.codec == 1 and header.codec_name == "mp3"
    assert header.n_entries == 3 and not header.floppy and not header.demo
    assert [e.name for e in entries] == ["020001P2.SB", "27SSSSSS.SB", "QUEEN.JAS"]
    table_end = fx.HEADER_SIZE + 3 * fx.ENTRY_SIZE
    assert [(e.offset, e.size) for e in entries] == [(table_end, 3), (table_end + 3, 2),
                                                      (table_end + 5, 5)]
    assert data[entries[2].offset:entries[2].offset + entries[2].size] == b"fghij"
    assert [e.stem for e in entries] == ["020001P2", "27SSSSSS", "QUEEN"]
    assert [fx.classify(e) for e in entries] == ["speech", "sfx", "other"]


@pytest.mark.parametrize("name,kind", [
    ("020001P2.SB", "speech"), ("03SSSSJ1.SB", "speech"), ("12XXXXP1.SB", "speech"),
    ("C12A_011.SB", "speech"), ("JOE00011.SB", "speech"), ("COMIC011.SB", "speech"),
    ("27SSSSSS.SB", "sfx"), ("116BSSSS.SB", "sfx"), ("1000SSSS.SB", "sfx"),
    ("3SSSSSSS.SB", "sfx"), ("ROOM1.PCX", "other"), ("QUEEN.JAS", "other"),
])
def test_classify(name, kind):
    assert fx.classify(fx.Entry(name, 1, 0, 0)) == kind


def test_parse_table_rejects_bad_files():
    with pytest.raises(fx.FormatError, match="magic"):
        fx.parse_table(b"XXXX" + bytes(20))
    with pytest.raises(fx.FormatError, match="short"):
        fx.parse_table(b"QTBL")
    good = build_queen_1c([("A.SB", b"1234")])
    with pytest.raises(fx.FormatError, match="table"):
        fx.parse_table(good[:fx.HEADER_SIZE + 5])  # table cut short
    with pytest.raises(fx.FormatError, match="outside"):
        fx.parse_table(good[:-1])  # data of the entry runs past the end


def test_extract_raw_sb(tmp_path):
    data = build_queen_1c([
        ("020001P2.SB", raw_sb(1.0)),                 # speech, written
        ("020006J1.SB", raw_sb(0.5, version=110)),    # speech, v110 header, written
        ("030001P1.SB", raw_sb(0.1)),                 # too short
        ("040001P1.SB", raw_sb(31.0)),                # too long
        ("050001P1.SB", b"\x00\x00\x68\x00" + bytes(106) + bytes([128]) * 12000),  # silent
        ("27SSSSSS.SB", raw_sb(1.0)),                 # sound effect: not a candidate
        ("QUEEN.JAS", b"not audio"),
    ], codec=0)
    out = tmp_path / "out"
    summary = fx.extract(data, out)
    assert summary["speech_entries"] == 5 and summary["sfx_entries"] == 1
    assert summary["other_entries"] == 1 and summary["written"] == 2
    assert summary["skipped"] == {"too_short": 1, "too_long": 1, "silent": 1}
    with open(out / "manifest.tsv", newline="") as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    assert list(rows[0]) == ["id", "path", "duration_s", "sample_rate", "resource_name"]
    assert [r["id"] for r in rows] == ["fotaq-020001p2", "fotaq-020006j1"]
    assert [r["resource_name"] for r in rows] == ["020001P2.SB", "020006J1.SB"]
    for r, secs in zip(rows, (1.0, 0.5)):
        info = sf.info(r["path"])
        assert info.samplerate == fx.PC_SOUND_RATE == int(r["sample_rate"])
        assert info.channels == 1 and info.subtype == "PCM_16"
        assert abs(float(r["duration_s"]) - secs) < 1e-3
        x, _ = sf.read(r["path"], dtype="int16")
        assert 20000 < np.abs(x.astype(int)).max() < 32768  # 8-bit PCM scaled to 16 bits
    assert abs(summary["hours"] - 1.5 / 3600) < 1e-6

    limited = fx.extract(data, tmp_path / "lim", limit=1)
    assert limited["processed"] == 1 and limited["written"] == 1


def test_compressed_rate_fix(tmp_path):
    """A compressed stream declaring 11025 Hz (old compress_queen) is written at 11840 Hz."""
    buf = io.BytesIO()
    t = np.arange(11025) / 11025
    sf.write(buf, (0.3 * np.sin(2 * np.pi * 300 * t)).astype(np.float32), 11025,
             format="FLAC")
    data = build_queen_1c([("JOE00011.SB", buf.getvalue())], codec=3)
    summary = fx.extract(data, tmp_path / "a")
    assert summary["written"] == 1 and summary["sample_rates"] == {11840: 1}
    kept = fx.extract(data, tmp_path / "b", fix_rate=False)
    assert kept["sample_rates"] == {11025: 1}


def test_extract_corrupt_stream_is_counted(tmp_path):
    data = build_queen_1c([("JOE00011.SB", b"this is not flac at all")], codec=3)
    summary = fx.extract(data, tmp_path)
    assert summary["written"] == 0 and summary["skipped"] == {"decode_error": 1}


def test_game_dir_cli(tmp_path):
    game = tmp_path / "game"
    game.mkdir()
    (game / "queen.1c").write_bytes(build_queen_1c([("020001P2.SB", raw_sb(1.0))]))
    assert fx.main(["--game-dir", str(game), "--output-dir", str(tmp_path / "o")]) == 0
    assert (tmp_path / "o" / "wav" / "fotaq-020001p2.wav").is_file()
    (game / "queen.1c").write_bytes(b"nope" * 10)
    assert fx.main(["--game-dir", str(game), "--output-dir", str(tmp_path / "p")]) == 2


@pytest.mark.slow
@pytest.mark.skipif(not DEB.is_file(), reason=f"{DEB} not present")
def test_extract_real_deb_limit5(tmp_path):
    assert fx.main(["--deb", str(DEB), "--output-dir", str(tmp_path), "--limit", "5"]) == 0
    with open(tmp_path / "manifest.tsv", newline="") as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    assert len(rows) == 5
    for r in rows:
        info = sf.info(r["path"])
        assert info.channels == 1 and info.subtype == "PCM_16" and info.samplerate == 11840
        assert 0.3 <= float(r["duration_s"]) <= 30.0
        assert r["id"] == "fotaq-" + r["resource_name"][:-3].lower()
