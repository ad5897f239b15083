"""Subtitles and JSON documents of the runtime's command line (``--format srt|vtt|json``): the
cue logic on made-up word times, then the shipped model on espeak-ng speech, its files parsed back."""

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import write_wav
from zipformer_pc.runtime.stream import Segment
from zipformer_pc.runtime.subtitles import layout, make_cues, output_paths, split_segment, to_srt, to_vtt
from zipformer_pc.runtime.timestamps import TimedWord

ROOT = Path(__file__).resolve().parents[2]
PRETRAINED = ROOT / "egs" / "synth" / "pretrained"
VOICE = ["-v", "en-us+m1", "-s", "165"]  # a training voice of the synthetic corpus
# Two passages (not sentences of the corpus) with 2.5 s of silence between them: two endpointed
# segments, the first longer than a cue may be.
FIRST = ("When the letter came, she read it twice and then walked out into the garden. The morning was cold "
         "and bright, and the path by the river was empty.")
SECOND = "She thought of her sister, who had gone to London in the spring, and wondered whether she would come home."


# ---------------------------------------------------------------------------
# a tiny SRT / WebVTT reader, strict about what the writers must produce

SRT_TIME = r"(\d\d):(\d\d):(\d\d),(\d\d\d)"
VTT_TIME = r"(\d\d):(\d\d):(\d\d)\.(\d\d\d)"


def _ms(h, m, s, ms):
    return ((int(h) * 60 + int(m)) * 60 + int(s)) * 1000 + int(ms)


def parse_srt(text):
    """[(number, start ms, end ms, [lines])], asserting the layout: blocks split by one blank line,
    each a number, a time line and one or more text lines."""
    assert text.endswith("\n") and not text.endswith("\n\n\n"), repr(text[-20:])
    cues = []
    for block in text.rstrip("\n").split("\n\n"):
        lines = block.split("\n")
        assert len(lines) >= 3 and lines[0].isdigit(), block
        m = re.fullmatch(f"{SRT_TIME} --> {SRT_TIME}", lines[1])
        assert m, lines[1]
        cues.append((int(lines[0]), _ms(*m.groups()[:4]), _ms(*m.groups()[4:]), lines[2:]))
    return cues


def parse_vtt(text):
    """[(start ms, end ms, [lines])] after the ``WEBVTT`` header."""
    blocks = text.rstrip("\n").split("\n\n")
    assert blocks[0] == "WEBVTT", blocks[0]
    cues = []
    for block in blocks[1:]:
        lines = block.split("\n")
        m = re.fullmatch(f"{VTT_TIME} --> {VTT_TIME}", lines[0])
        assert m and len(lines) >= 2, block
        cues.append((_ms(*m.groups()[:4]), _ms(*m.groups()[4:]), lines[1:]))
    return cues


def check_cues(cues, duration_ms, max_chars=42, max_ms=6000):
    """In order, never overlapping, within the audio, within the limits; returns the joined text."""
    prev_end = 0
    for start, end, lines in cues:
        assert prev_end <= start < end <= duration_ms, (prev_end, start, end, duration_ms)
        assert end - start <= max_ms, (start, end, lines)
        assert 1 <= len(lines) <= 2 and all(0 < len(ln) <= max_chars for ln in lines), lines
        assert all(ln == ln.strip() and "  " not in ln for ln in lines), lines
        prev_end = end
    return " ".join(" ".join(lines) for _, _, lines in cues)


# ---------------------------------------------------------------------------
# the cue logic


def timed(text, start=0.0, step=0.3):
    """The words of ``text``, one every ``step`` seconds, each lasting 0.25 s."""
    return [TimedWord(w, start + i * step, start + i * step + 0.25) for i, w in enumerate(text.split())]


def test_layout_keeps_lines_short_even_and_breaks_after_a_mark():
    assert layout(["Hello", "world."], 42) == ["Hello world."]
    lines = layout("the quick brown fox jumps over the lazy dog and then some more words".split(), 42)
    assert len(lines) == 2 and all(len(ln) <= 42 for ln in lines)
    assert abs(len(lines[0]) - len(lines[1])) <= 8
    # a comma a little off the middle wins over the even break
    assert layout("Yes, I told her so, and she was quite right about it too".split(), 42) == \
        ["Yes, I told her so,", "and she was quite right about it too"]
    assert layout(["x" * 43], 42) is None and layout("a " * 40, 10, max_lines=2) is None
    assert layout("one two three".split(), 8, max_lines=1) is None


def test_a_long_segment_is_cut_into_cues_within_the_limits_preferring_sentence_ends():
    text = ("When the letter came, she read it twice and then walked out into the garden. The morning was cold "
            "and bright, and the path by the river was empty. She thought of her sister.")
    words = timed(text)
    cues = split_segment(words, 42, 6.0)
    assert [w for c in cues for w in c] == words  # every word once, in order
    for c in cues:
        assert layout([w.word for w in c], 42) is not None and c[-1].end - c[0].start <= 6.0
    assert cues[0][-1].word == "garden." or cues[0][-1].word.endswith((".", ","))
    # the cut after "came," leaves a cue long enough; one after a lone "Yes," would not
    short = split_segment(timed("Yes, she said it was the kind of thing that no one would ever want to hear again"),
                          20, 60.0)
    assert [w.word for w in short[0]][0] == "Yes," and len(short[0]) > 1
    # the time limit alone: 1 s cues of 3 words (0.3 s apart, 0.25 s long)
    by_time = split_segment(timed("a b c d e f g h i"), 42, 1.0)
    assert [len(c) for c in by_time] == [3, 3, 3]
    # a word longer than a line is a cue of its own, kept whole
    assert [[w.word for w in c] for c in split_segment(timed("so " + "x" * 50 + " end"), 42, 6.0)] == \
        [["so"], ["x" * 50], ["end"]]


def test_cue_times_are_ordered_disjoint_and_within_the_audio_even_for_late_words():
    # the model emitted the last words in the tail silence, after the 3 s of audio
    words = [TimedWord("One.", 0.1, 0.5), TimedWord("Two.", 2.9, 3.3), TimedWord("Three.", 3.4, 3.6)]
    segs = [Segment(0, 0.0, 4.0, {"P": "One. Two. Three."}, {"P": words})]
    cues = make_cues(segs, 3.0, max_line_chars=6, max_lines=1)
    assert [c.text for c in cues] == ["One.", "Two.", "Three."]
    prev = 0
    for c in cues:
        assert prev <= c.start_ms < c.end_ms <= 3000
        prev = c.end_ms
    assert cues[0].start_ms == 100 and cues[0].end_ms == 500


def test_n_is_shown_when_there_is_no_p_and_the_writers_format_times():
    segs = [Segment(0, 0.0, 2.0, {"N": "hello world"}, {"N": timed("hello world", 3661.0)})]
    cues = make_cues(segs, 3700.0)
    assert [c.text for c in cues] == ["hello world"]
    srt = to_srt(cues)
    assert srt == "1\n01:01:01,000 --> 01:01:01,550\nhello world\n"
    assert to_vtt(cues) == "WEBVTT\n\n01:01:01.000 --> 01:01:01.550\nhello world\n"
    assert parse_srt(srt) == [(1, 3661000, 3661550, ["hello world"])]


def test_where_the_files_go(tmp_path):
    a, b = tmp_path / "in" / "a.wav", tmp_path / "in" / "b.wav"
    # no --output: next to each wav (sherpa-onnx's generate-subtitles.py)
    assert output_paths(["a", "b"], [a, b], None, "srt") == [a.with_suffix(".srt"), b.with_suffix(".srt")]
    # one input: --output is the file, unless it is a folder
    assert output_paths(["a"], [a], tmp_path / "x.vtt", "vtt") == [tmp_path / "x.vtt"]
    assert output_paths(["a"], [a], tmp_path, "vtt") == [tmp_path / "a.vtt"]
    assert output_paths(["a"], [a], f"{tmp_path}/new/", "json") == [tmp_path / "new" / "a.json"]
    # several inputs: a folder, one <id>.srt each; ids that are paths are flattened
    assert output_paths(["a", "b"], [a, b], tmp_path / "subs", "srt") == [tmp_path / "subs" / "a.srt",
                                                                            tmp_path / "subs" / "b.srt"]
    assert output_paths(["x/a", "y/a"], [a, b], tmp_path / "subs", "srt")[1] == tmp_path / "subs" / "y_a.srt"
    (tmp_path / "taken.srt").write_text("")
    for bad in (tmp_path / "taken.srt", tmp_path / "all.srt"):
        with pytest.raises(ValueError, match="must be a folder"):
            output_paths(["a", "b"], [a, b], bad, "srt")
    with pytest.raises(ValueError, match="give --output DIR"):
        output_paths(["cut1"], [None], None, "srt")
    with pytest.raises(ValueError, match="both be written"):
        output_paths(["x/a", "x_a"], [a, b], tmp_path / "subs", "srt")


# ---------------------------------------------------------------------------
# the shipped model on espeak-ng speech


@pytest.fixture(scope="module")
def speech(tmp_path_factory):
    """talk.wav: FIRST, 2.5 s of silence, SECOND; its duration and the silence (start, end) in ms."""
    from zipformer_pc.runtime import read_wav

    if shutil.which("espeak-ng") is None:
        pytest.fail("espeak-ng is missing: tools/setup_env.sh installs it")
    d = tmp_path_factory.mktemp("speech")
    parts = []
    for name, text in (("first", FIRST), ("second", SECOND)):
        subprocess.run(["espeak-ng", *VOICE, "-w", str(d / f"{name}.wav"), text], check=True, capture_output=True)
        samples, rate = read_wav(str(d / f"{name}.wav"))
        parts.append(samples)
    audio = np.concatenate([parts[0], np.zeros(int(2.5 * rate), np.float32), parts[1]])
    write_wav(d / "talk.wav", audio, rate)
    gap = len(parts[0]) * 1000 // rate
    return d / "talk.wav", int(len(audio) * 1000 / rate), (gap, gap + 2500)


def transcribe(*args, cwd=ROOT):
    r = subprocess.run([sys.executable, "-m", "zipformer_pc.transcribe", "--model-dir", str(PRETRAINED),
                        *map(str, args)], cwd=cwd, capture_output=True, text=True, timeout=300)
    return r


def transcripts(stdout):
    """{id: {"P": ..., "N": ...}} of the command line's 'id<TAB>P: ...<TAB>N: ...' lines."""
    out = {}
    for line in stdout.splitlines():
        if "\t" in line:
            uid, *fields = line.split("\t")
            out[uid] = dict(f.split(": ", 1) for f in fields)
    return out


def test_srt_of_the_shipped_model_parses_back_within_the_limits_and_joins_to_p(speech, tmp_path):
    wav, duration_ms, (gap_start, gap_end) = speech
    out = tmp_path / "talk.srt"
    r = transcribe("--format", "srt", "--output", out, wav)
    assert r.returncode == 0, r.stderr[-3000:]
    p = transcripts(r.stdout)["talk"]["P"]
    cues = parse_srt(out.read_text(encoding="utf-8"))
    assert [n for n, *_ in cues] == list(range(1, len(cues) + 1))
    assert check_cues([c[1:] for c in cues], duration_ms) == p
    assert len(cues) >= 4, cues  # 2 segments, the first more than one cue's worth
    # the endpoint cut in the silence: no cue spans it
    assert not [c for c in cues if c[1] < gap_start and c[2] > gap_end], cues
    assert p[:1].isupper() and p.endswith(".") and p.count(".") >= 2, p
    # tighter limits on the same speech
    r = transcribe("--format", "srt", "--output", out, "--max-line-chars", 20, "--max-cue-seconds", 2.5, wav)
    assert r.returncode == 0, r.stderr[-3000:]
    tight = parse_srt(out.read_text(encoding="utf-8"))
    assert check_cues([c[1:] for c in tight], duration_ms, 20, 2500) == p and len(tight) > len(cues)


def test_vtt_and_json_of_several_inputs_go_to_one_file_each_in_the_output_folder(speech, tmp_path):
    wav, duration_ms, _ = speech
    short = tmp_path / "hello.wav"
    subprocess.run(["espeak-ng", *VOICE, "-w", str(short), "Good morning to you all."], check=True,
                   capture_output=True)
    got = {}
    for fmt in ("vtt", "json"):
        r = transcribe("--format", fmt, "--output", tmp_path / "out", wav, short)
        assert r.returncode == 0, r.stderr[-3000:]
        got[fmt] = transcripts(r.stdout)
        assert sorted(p.name for p in (tmp_path / "out").glob(f"*.{fmt}")) == [f"hello.{fmt}", f"talk.{fmt}"]
    assert got["vtt"] == got["json"]
    text = got["vtt"]["talk"]
    assert check_cues(parse_vtt((tmp_path / "out" / "talk.vtt").read_text(encoding="utf-8")), duration_ms) == \
        text["P"]
    doc = json.loads((tmp_path / "out" / "talk.json").read_text(encoding="utf-8"))
    assert doc["id"] == "talk" and doc["text"] == text and abs(doc["duration"] * 1000 - duration_ms) <= 1
    assert len(doc["segments"]) == 2, [s["text"] for s in doc["segments"]]
    for mode in ("P", "N"):
        assert " ".join(s["text"][mode] for s in doc["segments"]) == text[mode]
        words = [w for s in doc["segments"] for w in s["words"][mode]]
        assert " ".join(w["word"] for w in words) == text[mode]
        assert all(a["start"] < a["end"] <= b["start"] for a, b in zip(words, words[1:]))
    marks = [w["word"] for s in doc["segments"] for w in s["words"]["P"] if w["word"][-1] in ".,?"]
    assert len(marks) >= 4, marks  # marks ride on their words


def test_subtitles_default_to_the_wavs_folder_and_bad_outputs_are_clear_errors(speech, tmp_path):
    wav, *_ = speech
    local = tmp_path / "talk.wav"
    shutil.copy(wav, local)
    r = transcribe("--format", "srt", local)
    assert r.returncode == 0 and (tmp_path / "talk.srt").is_file(), r.stderr[-3000:]
    other = tmp_path / "b.wav"
    shutil.copy(wav, other)
    r = transcribe("--format", "srt", "--output", tmp_path / "all.srt", local, other)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert r.stderr.strip().splitlines()[-1].startswith(f"error: --output {tmp_path / 'all.srt'} names a file")
    assert not (tmp_path / "all.srt").exists()


def test_tsv_is_the_default_and_unchanged(speech, tmp_path):
    wav, *_ = speech
    runs = {}
    for extra in ([], ["--format", "tsv"]):
        out = tmp_path / f"out{len(extra)}.tsv"
        r = transcribe("--output", out, *extra, wav)
        assert r.returncode == 0, r.stderr[-3000:]
        runs[len(extra)] = (re.sub(r"RTF .*", "", r.stdout), out.read_bytes())
    assert runs[0] == runs[2]
    lines = runs[0][1].decode().splitlines()
    assert [ln.split("\t")[:2] for ln in lines] == [["talk", "P"], ["talk", "N"]]
    assert runs[0][0].startswith("talk\tP: ")
