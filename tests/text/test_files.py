"""zipformer_pc.files.text_writer: the bytes depend on the text only."""

import gzip
import time

from zipformer_pc.files import text_writer

TEXT = "ngram 1=3\nHello, world.\n\u00e9t\u00e9\n"


def _write(path, text, monkeypatch, now):
    monkeypatch.setattr(time, "time", lambda: now)  # what gzip would stamp into the header
    with text_writer(path) as f:
        f.write(text)
    return path.read_bytes()


def test_gzip_bytes_do_not_depend_on_time_or_name(tmp_path, monkeypatch):
    a = _write(tmp_path / "a.arpa.gz", TEXT, monkeypatch, 1.0e9)
    b = _write(tmp_path / "other-name.arpa.gz", TEXT, monkeypatch, 1.7e9)
    assert a == b
    assert a[:2] == b"\x1f\x8b" and a[4:8] == b"\0\0\0\0"  # gzip magic, zero time stamp
    assert gzip.decompress(a).decode("utf-8") == TEXT
    assert _write(tmp_path / "c.arpa.gz", TEXT + "x", monkeypatch, 1.0e9) != a


def test_plain_names_are_written_as_utf8_text(tmp_path, monkeypatch):
    raw = _write(tmp_path / "a.arpa", TEXT, monkeypatch, 1.0e9)
    assert raw == TEXT.encode("utf-8")
