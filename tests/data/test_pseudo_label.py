"""local/pseudo_label.py: recordings packed into windows, Whisper's words given back
to the recording they were said in, the filter, and a run that goes on where it
stopped. Whisper itself is replaced by a fake that 'hears' a word per recording."""

import csv
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import soundfile as sf

from conftest import local_module

ROOT = Path(__file__).resolve().parents[2]


pl = local_module("pseudo_label")
SR = pl.SAMPLE_RATE


class FakeWhisper:
    """Finds every run of non-silent samples in the window and 'hears' the word its
    amplitude encodes (amplitude k/10 -> WORDS[k]), with the time it was found at."""

    WORDS = ["zero", "hello", "world", "again", "fine", "seven", "words", "more", "ends", "last"]

    def __init__(self):
        self.calls = []

    def transcribe(self, audio, **kw):
        self.calls.append((len(audio) / SR, kw))
        loud = np.abs(audio) > 1e-3
        words, i = [], 0
        while i < len(audio):
            if loud[i]:
                j = i
                while j < len(audio) and loud[j]:
                    j += 1
                k = int(round(float(np.abs(audio[i:j]).max()) * 10))
                words.append(SimpleNamespace(word=" " + self.WORDS[k] + ".", start=i / SR, end=j / SR,
                                             probability=0.9 if k != 9 else 0.1))
                i = j
            else:
                i += 1
        seg = SimpleNamespace(words=words, no_speech_prob=0.01, compression_ratio=1.2,
                              text=" ".join(w.word for w in words))
        return iter([seg]), None


def clip(k, sec):
    return np.full(int(sec * SR), k / 10, dtype=np.float32)


def test_windows_pack_consecutive_recordings_up_to_the_limit():
    rows = [{"id": str(i)} for i in range(5)]
    seconds = {str(i): float(s) for i, s in enumerate([10, 10, 9, 30, 2])}
    wins = pl.windows(rows, seconds, max_sec=28.0, gap_sec=1.0)
    assert [[r["id"] for r in w] for w in wins] == [["0", "1"], ["2"], ["3"], ["4"]]


def test_each_word_goes_back_to_its_recording():
    model = FakeWhisper()
    res = pl.transcribe_window(model, [clip(1, 1.0), clip(2, 0.5), clip(3, 2.0)], gap_sec=1.0, beam=1)
    assert [r["text"] for r in res] == ["Hello.", "World.", "Again."]
    assert model.calls[0][0] == pytest.approx(1.0 + 1 + 0.5 + 1 + 2.0)
    assert model.calls[0][1]["word_timestamps"] is True and model.calls[0][1]["temperature"] == 0.0
    assert res[0]["avg_logprob"] == pytest.approx(np.log(0.9))


def test_a_recording_nothing_was_heard_in_is_empty():
    res = pl.transcribe_window(FakeWhisper(), [clip(1, 1.0), np.zeros(SR, np.float32)], gap_sec=1.0, beam=1)
    assert res[1]["text"] == "" and res[1]["avg_logprob"] == -10.0


@pytest.mark.parametrize("text,lp,ns,cr,dur,why", [
    ("Hello there, friend.", -0.1, 0.0, 1.0, 1.5, ""),
    ("", -0.1, 0.0, 1.0, 1.5, "empty"),
    ("Press 7 now.", -0.1, 0.0, 1.0, 1.5, "digits or symbols"),
    ("It costs 5%.", -0.1, 0.0, 1.0, 1.5, "digits or symbols"),
    ("Hello there.", -0.9, 0.0, 1.0, 1.5, "low log-probability"),
    ("Hello there.", -0.4, 0.9, 1.0, 1.5, "no speech"),
    ("Hello there.", -0.1, 0.9, 1.0, 1.5, ""),
    ("Buking, buking. Buking, buking.", -0.1, 0.0, 1.0, 2.0, "repetitive"),
    ("Hello hello hello.", -0.1, 0.0, 3.0, 1.5, "repetitive"),
    ("one two three four five six seven eight nine ten eleven twelve", -0.1, 0.0, 1.0, 1.0, "speaking rate"),
])
def test_the_filter_says_why(text, lp, ns, cr, dur, why):
    args = pl.get_parser().parse_args(["--manifest", "m", "--output", "o"])
    row = {"text": text, "avg_logprob": str(lp), "no_speech_prob": str(ns), "compression_ratio": str(cr),
           "duration": str(dur)}
    assert pl.verdict(row, args) == why


@pytest.fixture
def fake_whisper(monkeypatch):
    """The fake model, and the test's 16 kHz WAVs read with soundfile: the run must not
    need faster-whisper (or its PyAV decoder) installed to be tested."""
    model = FakeWhisper()
    monkeypatch.setattr(pl, "load_model", lambda args: model)
    monkeypatch.setattr(pl, "audio_16k", lambda path: sf.read(path, dtype="float32")[0])
    return model


def test_audio_is_decoded_to_16k_mono(tmp_path):
    pytest.importorskip("faster_whisper")
    stereo = np.stack([clip(5, 0.5)[:4000], clip(5, 0.5)[:4000]], axis=1)
    sf.write(tmp_path / "a.wav", stereo, 8000, subtype="PCM_16")
    audio = pl.audio_16k(str(tmp_path / "a.wav"))
    assert audio.dtype == np.float32 and audio.ndim == 1
    assert len(audio) == pytest.approx(8000, abs=10)
    assert float(np.abs(audio[100:-100]).mean()) == pytest.approx(0.5, abs=0.02)


def write_manifest(tmp_path, amplitudes):
    wav_dir = tmp_path / "wav"
    wav_dir.mkdir()
    with open(tmp_path / "manifest.tsv", "w") as f:
        f.write("id\tpath\tduration_s\n")
        for i, k in enumerate(amplitudes):
            p = wav_dir / f"u{i}.wav"
            sf.write(p, clip(k, 1.0), SR, subtype="PCM_16")
            f.write(f"u{i}\twav/u{i}.wav\t1.0\n")
    return tmp_path / "manifest.tsv"


def read_tsv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))


def test_a_run_keeps_the_sure_transcripts_and_goes_on_where_it_stopped(tmp_path, fake_whisper):
    man = write_manifest(tmp_path, [1, 2, 9, 4])  # amplitude 9: the fake is unsure of it
    model = fake_whisper
    out = tmp_path / "out" / "pseudo.tsv"
    common = ["--manifest", str(man), "--speaker", "game", "--output", str(out), "--window", "2.5", "--gap", "0.5"]
    assert pl.main(common + ["--limit", "2"]) == 0
    assert len(model.calls) == 1  # two recordings of 1 s in one 2.5 s window
    assert pl.main(common) == 0  # the two others now, the first two not again
    assert len(model.calls) == 2
    kept = read_tsv(out)
    assert sorted(r["text"] for r in kept) == ["Fine.", "Hello.", "World."]
    assert {r["speaker"] for r in kept} == {"game"}
    assert all(Path(r["path"]).is_file() for r in kept)
    raw = read_tsv(out.with_name("pseudo.tsv.raw.tsv"))
    assert sorted(r["id"] for r in raw) == ["u0", "u1", "u2", "u3"]
    # only the filter again, with another threshold: nothing is transcribed
    assert pl.main(common + ["--max-minutes", "0", "--min-logprob", "-5"]) == 0
    assert len(model.calls) == 2 and len(read_tsv(out)) == 4


def test_a_manifest_without_the_columns_is_a_clear_error(tmp_path):
    (tmp_path / "m.tsv").write_text("file\tsentence\nx.wav\thi\n")
    assert pl.main(["--manifest", str(tmp_path / "m.tsv"), "--output", str(tmp_path / "o.tsv")]) == 2


def test_labels_made_elsewhere_are_not_transcribed_again(tmp_path, fake_whisper):
    man = write_manifest(tmp_path, [1, 2])
    model = fake_whisper
    first = tmp_path / "a" / "pseudo.tsv"
    assert pl.main(["--manifest", str(man), "--output", str(first)]) == 0
    calls = len(model.calls)
    second = tmp_path / "b" / "pseudo.tsv"
    assert pl.main(["--manifest", str(man), "--output", str(second),
                    "--labels", str(first.with_name("pseudo.tsv.raw.tsv"))]) == 0
    assert len(model.calls) == calls
    assert [r["text"] for r in read_tsv(second)] == ["Hello.", "World."]
