"""zipformer_pc.runtime.utterances: decoding a list of utterances in turn and scoring it, with a stand-in
recognizer (the ONNX one is exercised through the CLI in tests/runtime/test_onnx.py)."""

import numpy as np
import pytest

from zipformer_pc.runtime import utterances
from zipformer_pc.runtime.utterances import Utterance


class EchoRecognizer:
    """Writes the utterance's stored text: N as given, P with a capital and a full stop."""

    def __init__(self, texts):
        self.texts = texts  # number of samples -> N text

    def recognize_segments(self, samples, rate, piece_seconds):
        assert piece_seconds == 0.1 and rate == 16000
        return [self.texts[len(samples)]]

    def transcript(self, segments):
        n = " ".join(segments)
        return {"N": n, "P": n[:1].upper() + n[1:] + "."}


def utt(uid, n_samples, speaker, ref_n, ref_p):
    return Utterance(uid, lambda: (np.zeros(n_samples, np.float32), 16000), speaker, ref_n, ref_p)


def unreadable():
    raise ValueError("not a wav file")


def test_decode_counts_skips_and_audio_and_scores_p_only_where_there_is_a_p_reference():
    rec = EchoRecognizer({16000: "hello world", 8000: "good day"})
    utts = [utt("a", 16000, "v1", "hello world", "Hello world."),
            Utterance("bad", unreadable, "v1", "x", "X."),
            utt("b", 8000, "v2", "good night", None)]  # N reference only
    seen = []
    run = utterances.decode(rec, utts, 0.1, on_decoded=seen.append)
    assert [d.utt.uid for d in run.decoded] == ["a", "b"] == [d.utt.uid for d in seen]
    assert run.skipped == 1 and run.audio_seconds == pytest.approx(1.5)
    assert run.decoded[1].hyps == {"N": "good day", "P": "Good day."}
    scores = utterances.score(run.decoded)
    assert scores["N"]["num_utts"] == 2 and scores["N"]["wer"] == pytest.approx(25.0)  # 1 error in 4 words
    assert scores["P"]["num_utts"] == 1 and scores["P"]["pc_wer"] == 0.0
    by_spk = utterances.score_by_speaker(run.decoded)
    assert list(by_spk) == ["v1", "v2"]
    assert by_spk["v1"]["N"]["wer"] == 0.0 and by_spk["v2"]["N"]["wer"] == pytest.approx(50.0)
    assert "P" not in by_spk["v2"]  # no P reference for that speaker


def speech_cuts(tmp_path):
    """Three cuts of speech-like wav files whose supervisions carry N, P and a speaker as the
    synthetic corpus's do (the tiny corpus's test manifest, without building it)."""
    from lhotse import CutSet, MonoCut, Recording, SupervisionSegment

    from conftest import speech_like, write_wav

    cuts = []
    for i, (n, p) in enumerate([("she reads it", "She reads it."), ("it reads", "It reads?"), ("she", "She!")]):
        wav = tmp_path / f"u{i}.wav"
        write_wav(wav, speech_like(1.0 + 0.5 * i, seed=i))
        rec = Recording.from_file(wav, recording_id=f"u{i}")
        sup = SupervisionSegment(id=f"u{i}", recording_id=f"u{i}", start=0, duration=rec.duration, text=n,
                                 speaker=f"v{i % 2}", custom={"text_p": p, "text_raw": p})
        cuts.append(MonoCut(id=f"u{i}", start=0, duration=rec.duration, channel=0, recording=rec, supervisions=[sup]))
    path = tmp_path / "synth_cuts_test.jsonl.gz"
    CutSet.from_cuts(cuts).to_file(path)
    return path


def test_from_cuts_reads_references_and_stops_at_the_limit(tmp_path):
    cuts = speech_cuts(tmp_path)
    utts = utterances.from_cuts(cuts, limit=2)
    assert len(utts) == 2 and len(utterances.from_cuts(cuts)) > 2
    samples, rate = utts[0].load()
    assert samples.dtype == np.float32 and rate == 16000 and len(samples) > rate // 10
    assert utts[0].ref_n and utts[0].ref_p and utts[0].ref_p != utts[0].ref_n and utts[0].speaker
