"""Endpoint rules and word timestamps of the streaming runtime (pure logic; no models)."""

import pytest

from conftest import scripted_search
from zipformer_pc.runtime.endpoint import EndpointConfig, EndpointRule
from zipformer_pc.runtime.timestamps import is_mark, token_times, word_times

F = 0.04  # seconds per encoder frame (25 Hz)


def frames(seconds: float) -> int:
    return round(seconds / F)


def test_default_rules_are_sherpa_onnx_s():
    ep = EndpointConfig()
    # rule 2: 1.2 s of silence after speech
    assert not ep.detected(frames(3.0), frames(1.16), True, F)
    assert ep.detected(frames(3.0), frames(1.2), True, F)
    # without speech rule 2 does not apply; rule 1 needs 2.4 s
    assert not ep.detected(frames(3.0), frames(2.0), False, F)
    assert ep.detected(frames(3.0), frames(2.4), False, F)
    # rule 3: 20 s, even while speaking
    assert not ep.detected(frames(19.9), 0, True, F)
    assert ep.detected(frames(20.0), 0, True, F)


def test_options_disable_and_validate():
    ep = EndpointConfig.from_options(rule2_min_trailing_silence=0.5, rule3_min_utterance_length=5)
    assert ep.detected(frames(2.0), frames(0.52), True, F)
    assert ep.detected(frames(5.0), 0, True, F)
    assert not EndpointConfig(enabled=False).detected(frames(60), frames(60), True, F)
    with pytest.raises(ValueError):
        EndpointRule(False, 0.0, 0.0)
    with pytest.raises(ValueError):
        EndpointRule(True, -1.0, 0.0)
    with pytest.raises(ValueError):
        EndpointConfig().detected(10, 11, True, F)


def test_words_carry_their_marks_and_times_are_ordered():
    pieces = ["\u2581Y", "es", ",", "\u2581she", "\u2581s", "a", "id", ".", "\u2581", "O", "k", "?"]
    fr = [3, 5, 9, 12, 20, 21, 24, 30, 40, 41, 43, 45]
    words = word_times(pieces, fr, F, offset=1.0)
    assert [w.word for w in words] == ["Yes,", "she", "said.", "Ok?"]
    assert words[0].start == pytest.approx(1.0 + 3 * F) and words[0].end == pytest.approx(1.0 + 10 * F)
    assert words[2].end == pytest.approx(1.0 + 31 * F)  # the mark's frame is inside its word
    for a, b in zip(words, words[1:]):
        assert a.start < a.end <= b.start < b.end
    toks = token_times(pieces, fr, F)
    assert [t.start for t in toks] == pytest.approx([f * F for f in fr])


def test_a_mark_emitted_as_a_word_of_its_own_joins_the_word_before():
    words = word_times(["\u2581hello", "\u2581", ".", "\u2581you"], [1, 4, 5, 9], F)
    assert [w.word for w in words] == ["hello.", "you"]
    assert words[0].end == pytest.approx(6 * F)
    # a leading mark has no word before it: it stays a word
    assert [w.word for w in word_times([",", "\u2581so"], [0, 2], F)] == [",", "so"]


def test_an_apostrophe_piece_is_part_of_a_word_not_a_mark():
    # "'tis" spelled as a word-start apostrophe and a continuation: one word, not a mark on "said"
    words = word_times(["\u2581said", "\u2581'", "tis", "\u2581Mr", "."], [1, 4, 5, 9, 10], F)
    assert [w.word for w in words] == ["said", "'tis", "Mr."]
    assert not is_mark("\u2581'") and not is_mark("'")
    assert is_mark(",") and is_mark("\u2581...") and is_mark("--")


def test_timestamps_reject_inconsistent_input():
    with pytest.raises(ValueError):
        token_times(["\u2581a", "b"], [1], F)
    with pytest.raises(ValueError):
        token_times(["\u2581a", "b"], [5, 4], F)


# ---------------------------------------------------------------------------
# segments in the recognizer, with the ONNX sessions replaced by a script


class _Scripted:
    """A recognizer whose encoder and search are scripted: ``emit[frame] = {mode: token}``; the rest
    (``_advance``: search, move on, reattach marks, endpoint, segments) is the real code."""

    FRAMES = 4  # encoder frames per chunk

    def __init__(self, tokens, emit):
        import numpy as np

        from zipformer_pc.runtime.recognizer import StreamingRecognizer
        from zipformer_pc.runtime.stream import ModeState

        rec = object.__new__(StreamingRecognizer)
        rec.tokens = tokens
        rec.search_modes = ["P", "N"]
        rec.transducer_type = "conditioned"
        rec.frame_seconds = F
        rec.context_size = 2
        rec.questions = None  # P as searched
        rec.endpoint = EndpointConfig.from_options(rule2_min_trailing_silence=0.4)
        rec.initial_hyp = lambda mode: ModeState(tokens=[], decoder_out=np.zeros(1))
        rec.decode_chunk_len = 4 * self.FRAMES
        rec.decoding_method = "greedy_search"
        rec._greedy = scripted_search(tokens, {m: {f: e[m] for f, e in emit.items() if m in e}
                                               for m in rec.search_modes})
        self.rec = rec

        class S:  # the parts of a Stream that _advance and segmenting use
            class fbank:
                @staticmethod
                def pop(n):
                    pass

        s = S()
        s.hyps = {m: rec.initial_hyp(m) for m in rec.search_modes}
        s.frames_done, s.segment_start, s.last_emit, s.segments, s.finished = 0, 0, -1, [], True
        s.frame_offset, s.num_chunks, s.states = 0, 0, None
        self.s = s

    def run_chunks(self, n_chunks):
        """What decode_stream does after the encoder, chunk by chunk (StreamingRecognizer._advance)."""
        import numpy as np

        for _ in range(n_chunks):
            self.rec._advance(self.s, np.zeros((self.FRAMES, 1), np.float32), None)


TOKENS = ["<blk>", "<sos/eos>", "<unk>", "\u2581", "\u2581yes", "\u2581Yes", ".", "\u2581no", "\u2581No", "?"]


def test_endpoints_cut_segments_and_each_keeps_its_final_mark():
    # "Yes." then 0.6 s of silence, then "No?" whose mark comes late; N emits the words only
    emit = {2: {"P": "\u2581Yes", "N": "\u2581yes"}, 5: {"P": "."},
            30: {"P": "\u2581No", "N": "\u2581no"}, 33: {"P": "?"}}
    run = _Scripted(TOKENS, emit)
    run.run_chunks(6)  # silence since frame 6: rule 2 (0.4 s) fires after the chunk ending at frame 16
    segs = run.s.segments
    assert len(segs) == 1 and segs[0].text == {"P": "Yes.", "N": "yes"}
    assert [w.word for w in segs[0].words["P"]] == ["Yes."]
    run.run_chunks(6)
    run.rec._end_segment(run.s)  # what finish() does after the last chunk
    assert [seg.text for seg in run.s.segments] == [{"P": "Yes.", "N": "yes"}, {"P": "No?", "N": "no"}]
    second = run.s.segments[1]
    assert second.id == 1 and second.start == pytest.approx(16 * F)
    assert second.words["P"][0].start == pytest.approx(30 * F) and second.words["P"][0].end == pytest.approx(34 * F)


def test_a_mark_that_arrives_after_the_endpoint_goes_back_to_its_segment():
    # the "." comes 0.6 s after "Yes", later than rule 2's 0.4 s: the cut came first
    emit = {2: {"P": "\u2581Yes", "N": "\u2581yes"}, 17: {"P": "."}, 30: {"P": "\u2581No", "N": "\u2581no"}}
    run = _Scripted(TOKENS, emit)
    run.run_chunks(12)
    run.rec._end_segment(run.s)
    texts = [seg.text for seg in run.s.segments]
    assert texts == [{"P": "Yes.", "N": "yes"}, {"P": "No", "N": "no"}], texts
    first = run.s.segments[0]
    assert first.words["P"][-1].word == "Yes." and first.words["P"][-1].end == pytest.approx(18 * F)
    assert [t.token for t in first.tokens["P"]] == ["\u2581Yes", "."]


def test_silence_alone_makes_no_segment():
    run = _Scripted(TOKENS, {})
    run.run_chunks(30)  # 4.8 s: rule 1 fires, nothing to keep
    run.rec._end_segment(run.s)
    assert run.s.segments == [] and run.s.segment_start == run.s.frames_done
