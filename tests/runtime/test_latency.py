"""Latency and stability of streaming output (zipformer_pc.runtime.latency)."""

import numpy as np
import pytest

from conftest import scripted_search
from zipformer_pc.runtime.latency import Snapshot, Trace, analyse, summarize, trace
from zipformer_pc.text import strip_marks


def test_strip_marks_keeps_inner_and_leading_characters():
    assert [strip_marks(w) for w in ("Hello,", "Mr.", "don't", "'tis?!", "yes", "...", "so--")] == \
        ["Hello", "Mr", "don't", "'tis", "yes", "", "so"]
    # only the project's marks (text.MARKS) are stripped: a plural possessive keeps its apostrophe
    assert strip_marks("Austens'") == "Austens'"
    assert strip_marks("Austens',") == "Austens'"


def test_delays_and_revisions_of_a_scripted_display():
    # P display over time (audio fed, compute): "Hel" grows to "Hello", its comma
    # comes one snapshot later, "world." is complete at the end
    snaps = [
        Snapshot(0.7, 0.05, {"P": ["Hel"]}),
        Snapshot(1.4, 0.05, {"P": ["Hello"]}),
        Snapshot(2.1, 0.10, {"P": ["Hello,", "world"]}),
        Snapshot(2.5, 0.02, {"P": ["Hello,", "world."]}),
    ]
    tr = Trace(2.5, snaps, {"P": ["Hello,", "world."]}, {"P": [1.0, 2.0]})
    a = analyse(tr)["P"]
    assert a["words"] == 2
    # "Hello" is final from 1.4 s (end 1.0 s); "world" from 2.1 s (end 2.0 s)
    assert a["delays"] == pytest.approx([0.4, 0.1])
    assert a["delays_rt"] == pytest.approx([0.45, 0.2])
    # the comma is shown at 2.1 s, the full stop at 2.5 s
    assert a["mark_delays"] == pytest.approx([1.1, 0.5])
    # "Hel" -> "Hello" is an extension, not a revision; attaching marks is neither
    assert (a["extensions"], a["revisions"], a["mark_revisions"]) == (1, 0, 0)
    pooled = summarize([{"P": a}, {"P": a}])["P"]
    assert pooled["words"] == 4 and pooled["marks"] == 4
    assert pooled["extensions_per_word"] == pytest.approx(0.5) and pooled["revisions_per_word"] == 0.0
    assert pooled["delays_mean_ms"] == pytest.approx(250.0)


def test_a_mark_that_changes_after_it_is_shown_counts_as_a_mark_revision():
    snaps = [Snapshot(1.0, 0.0, {"P": ["Yes,"]}), Snapshot(2.0, 0.0, {"P": ["Yes."]}),
             Snapshot(2.5, 0.0, {"P": ["yes."]})]
    a = analyse(Trace(2.5, snaps, {"P": ["yes."]}, {"P": [0.5]}))["P"]
    assert (a["extensions"], a["revisions"], a["mark_revisions"]) == (0, 1, 1)
    assert a["delays"] == pytest.approx([2.0]) and a["mark_delays"] == pytest.approx([2.0])


# what the search emits, per mode: {encoder frame: piece}; the real encoder runs
SCRIPT = {"P": {3: "\u2581She", 10: "\u2581read", 17: "s", 20: ",", 25: "\u2581it", 40: "."},
          "N": {3: "\u2581she", 10: "\u2581read", 17: "s", 25: "\u2581it"}}


def test_the_trace_of_a_streaming_recognizer_times_words_and_marks_by_their_chunks(scripted_model):
    from zipformer_pc.runtime import StreamingRecognizer

    model_dir, pieces = scripted_model
    rec = StreamingRecognizer.from_dir(model_dir)
    rec._greedy = scripted_search(pieces, SCRIPT)
    rate, piece = 16000, 0.1
    audio = (0.1 * np.random.default_rng(0).standard_normal(int(2.3 * rate))).astype(np.float32)
    tr = trace(rec, audio, rate, piece)
    assert tr.final_words == {"P": ["She", "reads,", "it."], "N": ["she", "reads", "it"]}
    fs = rec.frame_seconds
    assert tr.word_ends["P"] == pytest.approx([4 * fs, 18 * fs, 26 * fs])
    assert tr.word_ends["N"] == pytest.approx(tr.word_ends["P"])
    a = analyse(tr)
    chunk_frames = rec.decode_chunk_len // 4
    right = (rec.T - rec.decode_chunk_len) * rec.frame_shift / rate

    def shown_bounds(frame):
        """Audio fed when the chunk holding ``frame`` can run: its end plus the right context."""
        end = (frame // chunk_frames + 1) * chunk_frames * fs
        return end, end + right + piece + 0.03

    for m in ("P", "N"):
        assert (a[m]["words"], a[m]["extensions"], a[m]["revisions"], a[m]["mark_revisions"]) == (3, 1, 0, 0), m
        for d, end, last in zip(a[m]["delays"], tr.word_ends[m], (3, 17, 25)):
            lo, hi = shown_bounds(last)
            assert lo <= d + end <= hi, (m, last, d + end, lo, hi)
        assert all(rt >= d for rt, d in zip(a[m]["delays_rt"], a[m]["delays"]))
    # the comma comes 2 frames after "reads" ends but in the same chunk; the full stop in a later chunk
    assert len(a["P"]["mark_delays"]) == 2 and a["N"]["mark_delays"] == []
    assert a["P"]["mark_delays"][0] == pytest.approx(a["P"]["delays"][1])
    lo, hi = shown_bounds(40)
    assert lo <= a["P"]["mark_delays"][1] + 26 * fs <= hi


def test_a_word_emitted_in_the_tail_padding_ends_with_the_audio(scripted_model):
    """The recognizer pads the audio's tail with silence; a word whose last piece comes in a
    padding frame (a late or eager model) ended with the speech, so its delay is not negative."""
    from zipformer_pc.runtime import StreamingRecognizer

    model_dir, pieces = scripted_model
    rec = StreamingRecognizer.from_dir(model_dir)
    rate = 16000
    audio = (0.1 * np.random.default_rng(1).standard_normal(int(1.0 * rate))).astype(np.float32)
    last_audio_frame = int(1.0 / rec.frame_seconds) - 1
    script = {3: "\u2581She", last_audio_frame + 3: "\u2581read"}  # the second one in the padding
    emitted = []
    rec._greedy = scripted_search(pieces, {"P": script, "N": script}, emitted)
    tr = trace(rec, audio, rate, 0.1)
    assert last_audio_frame + 3 in emitted  # the padding frame was decoded
    assert tr.final_words["N"] == ["She", "read"] and tr.duration == pytest.approx(1.0)
    fs = rec.frame_seconds
    assert tr.word_ends["N"] == pytest.approx([4 * fs, 1.0])  # not (last_audio_frame + 4) * fs
    a = analyse(tr)["N"]
    assert a["delays"][1] == pytest.approx(0.0) and min(a["delays"]) >= 0
