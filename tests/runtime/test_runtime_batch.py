"""StreamingRecognizer.decode_streams: ready chunks of several streams in one encoder call
give what each stream gives decoded alone (segments, texts, word and token times)."""

import numpy as np
import pytest
from conftest import speech_like

from zipformer_pc.runtime import StreamingRecognizer
from zipformer_pc.runtime.endpoint import EndpointConfig


def _audio(n: int):
    """Utterances of different lengths with pauses, so that endpoints cut some of them."""
    return [np.concatenate([speech_like(1.0 + 0.37 * i, seed=i), np.zeros(8000 * (i % 3), np.float32),
                            speech_like(1.5, seed=100 + i)]) for i in range(n)]


def _interleaved(rec, audio, seed=0):
    """Feed every stream in random piece sizes, round-robin, decoding all of them together each round."""
    rng = np.random.default_rng(seed)
    streams = [rec.create_stream() for _ in audio]
    pos = [0] * len(audio)
    calls = 0
    while any(p < len(a) for p, a in zip(pos, audio)):
        for i, (s, a) in enumerate(zip(streams, audio)):
            if pos[i] < len(a):
                k = int(rng.integers(100, 6000))
                s.accept_waveform(16000, a[pos[i] : pos[i] + k])
                pos[i] += k
                if pos[i] >= len(a):
                    s.input_finished()
        calls += rec.decode_streams(streams, max_batch=3)
    return [[seg.as_dict() for seg in rec.finish(s)] for s in streams], calls


@pytest.mark.parametrize("int8", [False, True])
def test_batched_streams_equal_one_by_one(tiny_onnx_model, int8):
    endpoint = EndpointConfig.from_options(rule2_min_trailing_silence=0.3)
    # blank penalty 0: with the default 1.0 the fixture model emits on nearly every frame and no endpoint fires
    rec = StreamingRecognizer.from_dir(tiny_onnx_model, int8=int8, endpoint=endpoint, blank_penalty=0.0)
    # an int8 encoder quantizes each call's activations with one scale: batching is off for it
    assert rec.batch_encoder is (not int8)
    audio = _audio(7)
    alone = [[seg.as_dict() for seg in rec.recognize_segments(a, 16000, 0.1)] for a in audio]
    assert sum(len(segs) for segs in alone) > len(audio), "no endpoint fired: the test would prove less"
    assert all(seg["text"]["P"] for segs in alone for seg in segs), "the model emits nothing"
    together, chunks = _interleaved(rec, audio)
    assert together == alone
    assert chunks > 0


def test_decode_streams_batches_into_one_encoder_call(tiny_onnx_model):
    rec = StreamingRecognizer.from_dir(tiny_onnx_model)
    calls = []
    run = rec.encoder.run

    def counting_run(outputs, feeds):
        calls.append(feeds["x"].shape[0])
        return run(outputs, feeds)

    rec.encoder.run = counting_run
    streams = [rec.create_stream() for _ in range(5)]
    for i, s in enumerate(streams):
        s.accept_waveform(16000, speech_like(1.0 + 0.1 * i, seed=i))
    n = rec.decode_streams(streams, max_batch=4)
    per_stream = [s.num_chunks for s in streams]
    assert n == sum(per_stream) > 5
    # each round: one chunk of every ready stream, at most 4 per call
    assert max(calls) == 4 and sum(calls) == n and len(calls) < n
    assert not any(rec.is_ready(s) for s in streams)
    with pytest.raises(ValueError, match="twice"):
        rec.decode_streams([streams[0], streams[0]])
    with pytest.raises(ValueError, match="max_batch"):
        rec.decode_streams(streams, max_batch=0)
