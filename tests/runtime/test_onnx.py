"""ONNX export and the onnxruntime streaming recognizer: export self-check,
parity with the recipe's PyTorch decoding and with sherpa-onnx, arbitrary
audio pieces, resampling, empty input, the CLI."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch

from conftest import make_it_emit, write_wav
from zipformer_pc.decoding.beam_search import search
from zipformer_pc.training.checkpoint import load_model_for_inference
from zipformer_pc.decoding.decode import encode_utterances
from zipformer_pc.features import TAIL_SILENCE_FRAMES, knf_fbank, tail_padded_frames
from zipformer_pc.model.transducer import HeadConfig, build_model, make_model_config
from zipformer_pc.modes import MODE_N, MODE_P
from zipformer_pc.options import DEFAULT_BLANK_PENALTY
from zipformer_pc.export.onnx_export import check_export, export_model
from zipformer_pc.runtime import Resampler, StreamingRecognizer, find_model_files, read_wav

ROOT = Path(__file__).resolve().parents[2]

CHUNK, LEFT = 32, 64
UNK_ID = 2  # <blk> 0, <sos/eos> 1, <unk> 2 in the recipe's tokens.txt
SUFFIX = f"-epoch-2-avg-1-chunk-{CHUNK}-left-{LEFT}"


# ---------------------------------------------------------------------------
# resampling and wav reading (fast)


def test_resampler_reproduces_a_band_limited_signal():
    t_in = np.arange(8000) / 8000.0
    x = np.sin(2 * np.pi * 440 * t_in) + 0.5 * np.sin(2 * np.pi * 3000 * t_in)
    r = Resampler(8000, 16000)
    y = np.concatenate([r.process(x), r.flush()])
    assert len(y) == 16000
    t_out = np.arange(16000) / 16000.0
    ref = np.sin(2 * np.pi * 440 * t_out) + 0.5 * np.sin(2 * np.pi * 3000 * t_out)
    inner = slice(400, -400)  # away from the edges, where the signal starts/stops
    assert np.abs(y[inner] - ref[inner]).max() < 0.02


def test_resampler_is_the_same_in_pieces_and_at_once():
    rng = np.random.default_rng(0)
    x = rng.standard_normal(44100 // 2).astype(np.float32)
    whole = Resampler(44100, 16000)
    a = np.concatenate([whole.process(x), whole.flush()])
    pieces = Resampler(44100, 16000)
    out, i = [], 0
    for size in [1, 7, 441, 4410, 3000, 100000]:
        out.append(pieces.process(x[i : i + size]))
        i += size
    out.append(pieces.flush())
    b = np.concatenate(out)
    assert len(a) == len(b) == int(np.ceil(len(x) * 16000 / 44100))
    np.testing.assert_allclose(a, b, atol=1e-6)


def test_resampler_downsampling_removes_content_above_the_new_nyquist():
    t = np.arange(48000) / 48000.0
    x = np.sin(2 * np.pi * 12000 * t)  # above 8 kHz: must vanish at 16 kHz
    r = Resampler(48000, 16000)
    y = np.concatenate([r.process(x), r.flush()])
    assert np.abs(y[200:-200]).max() < 0.05


def test_read_wav_mixes_channels_and_rejects_non_wav(tmp_path):
    left = 0.5 * np.sin(np.linspace(0, 100, 1600))
    right = 0.3 * np.cos(np.linspace(0, 37, 1600))
    write_wav(tmp_path / "s.wav", np.stack([left, right], axis=1), 8000, channels=2)
    y, rate = read_wav(str(tmp_path / "s.wav"))
    assert rate == 8000 and y.shape == (1600,)
    np.testing.assert_allclose(y, (left + right) / 2, atol=1e-4)  # the mean, not one channel
    (tmp_path / "bad.wav").write_bytes(b"not a wav at all")
    with pytest.raises(ValueError, match="not a PCM wav"):
        read_wav(str(tmp_path / "bad.wav"))
    (tmp_path / "empty.wav").write_bytes(b"")
    with pytest.raises(ValueError, match=r"not a PCM wav file \(an empty file\)"):
        read_wav(str(tmp_path / "empty.wav"))


def test_wav_inputs_are_listed_and_named_without_clashes(tmp_path):
    """Folders give their .wav files (any case, subfolders too, sorted); a missing path and a
    folder without wavs are clear errors; inputs that share a name are told apart by their
    paths, so no two lines of output share an id, and a wav given twice is an error."""
    from zipformer_pc.runtime.audio import utterance_ids, wav_files

    for rel in ("a/x.wav", "a/sub/y.WAV", "b/x.wav", "a/notes.txt"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(b"")
    (tmp_path / "none").mkdir()
    files = wav_files([str(tmp_path / "a"), str(tmp_path / "b" / "x.wav")])
    assert [p.relative_to(tmp_path).as_posix() for p in files] == ["a/sub/y.WAV", "a/x.wav", "b/x.wav"]
    assert utterance_ids(files) == ["y", str(tmp_path / "a" / "x"), str(tmp_path / "b" / "x")]
    assert utterance_ids(files[:2]) == ["y", "x"]
    with pytest.raises(FileNotFoundError, match="does not exist"):
        wav_files([str(tmp_path / "missing.wav")])
    with pytest.raises(FileNotFoundError, match="a folder without .wav files"):
        wav_files([str(tmp_path / "none")])
    with pytest.raises(ValueError, match="given more than once"):
        utterance_ids(wav_files([str(tmp_path / "b"), str(tmp_path / "b" / "x.wav")]))


# ---------------------------------------------------------------------------
# export of untrained models of every type (fast)


@pytest.fixture(scope="module")
def tokens_file(tmp_path_factory) -> Path:
    p = tmp_path_factory.mktemp("tok") / "tokens.txt"
    p.write_text("".join(f"{t} {i}\n" for i, t in enumerate(["<blk>", "<sos/eos>", "<unk>"] + [
        f"\u2581w{i}" if i % 3 == 0 else (f"W{i}" if i % 3 == 1 else f"x{i}") for i in range(61)] + [".", ",", "?"])))
    return p


def random_model(model_type: str, vocab: int = 67):
    torch.manual_seed(0)
    head = HeadConfig(model_type=model_type, vocab_size=vocab, decoder_dim=64, joiner_dim=64, mode_dim=8)
    return build_model(make_model_config("tiny", {}, head)).eval()


def decoded(rec: StreamingRecognizer, x=None, rate: int = 16000):
    """A new stream of ``rec`` that has read ``x`` (none: no audio), been finished and decoded."""
    s = rec.create_stream()
    if x is not None:
        s.accept_waveform(rate, x)
    s.input_finished()
    rec.decode_stream(s)
    return s


@pytest.mark.parametrize("model_type,modes", [("conditioned", {"P", "N"}), ("two-decoder", {"P", "N"}),
                                              ("punct", {"P"}), ("norm", {"N"})])
def test_every_model_type_exports_and_recognizes(tmp_path, tokens_file, model_type, modes):
    model = random_model(model_type)
    files = export_model(model, tmp_path, tokens_file, CHUNK, LEFT)
    assert {k.split("-")[1] for k in files if k.startswith("decoder-")} == modes
    meta = {p.key: p.value for p in onnx.load(str(files["encoder"])).metadata_props}
    for key in ("model_type", "encoder_dims", "num_encoder_layers", "cnn_module_kernels", "left_context_len",
                "query_head_dims", "value_head_dims", "num_heads", "T", "decode_chunk_len"):
        assert key in meta, key
    assert meta["model_type"] == "zipformer2" and meta["T"] == str(2 * CHUNK + 7)
    assert meta["left_context_len"] == ",".join(str(LEFT // f) for f in (1, 2, 4, 8, 4, 2))
    dmeta = {p.key: p.value for p in onnx.load(str(files[f"decoder-{sorted(modes)[0]}"])).metadata_props}
    assert dmeta["context_size"] == "2" and dmeta["vocab_size"] == "67"
    rec = StreamingRecognizer(find_model_files(tmp_path))
    res = rec.recognize(np.random.default_rng(0).standard_normal(16000).astype(np.float32) * 0.1, 16000)
    expected = modes | ({"N"} if model_type == "punct" else set())
    assert set(res) == expected


def test_conditioned_decoders_differ_by_mode(tmp_path, tokens_file):
    """The mode is baked into each decoder file: same tokens, different outputs."""
    import onnxruntime as ort

    files = export_model(random_model("conditioned"), tmp_path, tokens_file, CHUNK, LEFT)
    y = np.array([[0, 5], [7, 9]], dtype=np.int64)
    p = ort.InferenceSession(str(files["decoder-P"])).run(None, {"y": y})[0]
    n = ort.InferenceSession(str(files["decoder-N"])).run(None, {"y": y})[0]
    assert p.shape == n.shape == (2, 64) and not np.allclose(p, n)


def test_export_check_catches_a_wrong_export(tmp_path, tokens_file):
    model = random_model("conditioned")
    files = export_model(model, tmp_path, tokens_file, CHUNK, LEFT)
    with torch.no_grad():
        model.joiners["main"].output_linear.weight.mul_(1.5)
    with pytest.raises(RuntimeError, match="joiner"):
        check_export(model, files, CHUNK, LEFT)


def sherpa_greedy_recognizer(files, mode: str, blank_penalty: float = 0.0):
    """sherpa-onnx's streaming greedy search on an exported set, one mode."""
    import sherpa_onnx

    return sherpa_onnx.OnlineRecognizer.from_transducer(
        tokens=str(files["tokens"]), encoder=str(files["encoder"]), decoder=str(files[f"decoder-{mode}"]),
        joiner=str(files[f"joiner-{mode}"]), num_threads=1, sample_rate=16000, feature_dim=80,
        decoding_method="greedy_search", blank_penalty=blank_penalty)


def sherpa_text(sherpa, rec: StreamingRecognizer, x: np.ndarray) -> str:
    """sherpa-onnx's transcript of ``x`` (16 kHz) with the tail padding ``rec`` adds (sherpa-onnx
    runs a chunk only when one more frame than T is ready), whitespace normalized."""
    st = sherpa.create_stream()
    st.accept_waveform(16000, x)
    st.accept_waveform(16000, np.zeros((rec.tail_padding_frames(len(x), 0) + 1) * rec.frame_shift, np.float32))
    st.input_finished()
    while sherpa.is_ready(st):
        sherpa.decode_stream(st)
    return " ".join(sherpa.get_result(st).split())


def test_a_front_end_of_64_channels_streams_in_onnxruntime_and_sherpa_onnx(tmp_path, tokens_file):
    """A front end of 64 channels: the export's self-check passes and sherpa-onnx, which allocates
    the front end's cache with 128 channels, runs it and writes what the recipe's runtime writes (a blank
    never wins, so every frame emits a token chosen by the encoder output)."""
    torch.manual_seed(0)
    head = HeadConfig(model_type="norm", vocab_size=67, decoder_dim=64, joiner_dim=64)
    model = build_model(make_model_config("tiny", {"front_end_channels": 64}, head)).eval()
    assert model.encoder.encoder_embed.conv[4].out_channels == 64
    with torch.no_grad():
        model.joiners["main"].output_linear.bias[0] = -1e3
    files = export_model(model, tmp_path, tokens_file, CHUNK, LEFT)
    x = np.random.default_rng(1).standard_normal(24000).astype(np.float32) * 0.1
    rec = StreamingRecognizer(find_model_files(tmp_path))
    ours = rec.recognize(x, 16000)["N"]
    assert len(ours.split()) > 5
    assert ours == sherpa_text(sherpa_greedy_recognizer(files, "N", rec.blank_penalty), rec, x)


def test_export_refuses_a_non_causal_model_and_bad_chunks(tmp_path, tokens_file):
    torch.manual_seed(0)
    head = HeadConfig(model_type="punct", vocab_size=67, decoder_dim=64, joiner_dim=64)
    model = build_model(make_model_config("tiny", {"causal": False}, head)).eval()
    with pytest.raises(ValueError, match="causal"):
        export_model(model, tmp_path, tokens_file, CHUNK, LEFT)
    with pytest.raises(ValueError, match="multiple"):
        export_model(random_model("punct"), tmp_path, tokens_file, 12, LEFT)


def test_int8_quantizes_every_linear_layer_of_the_joiner(tmp_path, tokens_file):
    files = export_model(random_model("two-decoder"), tmp_path, tokens_file, CHUNK, LEFT, int8=True)
    ops = [n.op_type for n in onnx.load(str(files["joiner-P.int8"])).graph.node]
    assert "Gemm" not in ops and "MatMul" not in ops
    assert ops.count("MatMulInteger") == 2  # encoder_proj and the output layer
    ops = [n.op_type for n in onnx.load(str(files["decoder-P.int8"])).graph.node]
    assert ops.count("MatMulInteger") == 1 and "Gemm" not in ops  # decoder_proj
    rec = StreamingRecognizer.from_dir(tmp_path, int8=True)
    assert set(rec.recognize(np.zeros(8000, np.float32), 16000)) == {"P", "N"}


def test_empty_and_tiny_inputs(tmp_path, tokens_file):
    export_model(random_model("conditioned"), tmp_path, tokens_file, CHUNK, LEFT)
    rec = StreamingRecognizer.from_dir(tmp_path)
    s = decoded(rec)
    assert rec.get_result(s) == {"P": "", "N": ""} and s.num_chunks == 0
    for n in (1, 80, 1200):  # shorter than the front end's receptive field, or one chunk
        rec.recognize(np.full(n, 0.01, np.float32), 16000)
    s = rec.create_stream()
    s.input_finished()
    with pytest.raises(RuntimeError, match="after input_finished"):
        s.accept_waveform(16000, np.zeros(10, np.float32))


@pytest.mark.parametrize("method", ["greedy_search", "modified_beam_search"])
def test_unk_is_read_as_blank_like_sherpa_onnx(tmp_path, tokens_file, method):
    model = random_model("punct")
    with torch.no_grad():  # <unk> wins every frame
        model.joiners["main"].output_linear.bias[UNK_ID] = 1e3
    export_model(model, tmp_path, tokens_file, CHUNK, LEFT)
    rec = StreamingRecognizer.from_dir(tmp_path, decoding_method=method)
    assert rec.tokens[rec.unk_id] == "<unk>"
    s = decoded(rec, np.random.default_rng(0).standard_normal(32000).astype(np.float32) * 0.1)
    assert s.num_chunks > 0 and rec.get_tokens(s) == {"P": []}


def test_tail_padding_adds_the_recipes_tail_silence_and_completes_the_last_chunk(tmp_path, tokens_file):
    export_model(random_model("punct"), tmp_path, tokens_file, CHUNK, LEFT)
    rec = StreamingRecognizer.from_dir(tmp_path)
    for seconds in (0.01, 0.3, 1.0, 1.37, 2.56, 2.63, 2.64):
        n = int(seconds * 16000)
        s = decoded(rec, np.full(n, 0.01, np.float32))
        frames = (n + 80) // 160
        # the chunks hold the audio and at least TAIL_SILENCE_FRAMES of silence, and no
        # chunk more than that needs (the encoder reads 2 chunk + 7 frames per chunk)
        read = 2 * CHUNK * s.num_chunks + 7
        assert frames + TAIL_SILENCE_FRAMES <= read < frames + TAIL_SILENCE_FRAMES + 2 * CHUNK, seconds
        assert read == tail_padded_frames(frames, CHUNK)
        assert s.fbank.num_frames_ready - s.frame_offset < rec.T  # nothing left undecoded
    assert decoded(rec).num_chunks == 0  # an empty stream runs nothing


# ---------------------------------------------------------------------------
# a trained tiny model: parity (slow)


@pytest.fixture(scope="module")
def test_audio(tiny_corpus):
    from lhotse import load_manifest

    cuts = load_manifest(tiny_corpus / "fbank" / "synth_cuts_test.jsonl.gz")
    return [(c.id, c.load_audio()[0].astype(np.float32)) for c in list(cuts)[:4]]


@pytest.fixture(scope="module")
def exported(trained_tiny_model, tiny_corpus, test_audio, tmp_path_factory):
    exp_dir, epoch = trained_tiny_model
    out = tmp_path_factory.mktemp("onnx")
    model = load_model_for_inference(exp_dir, epoch, 1)
    make_it_emit(model, torch.from_numpy(knf_fbank(test_audio[0][1])))
    export_model(model, out, tiny_corpus / "lang_bpe_120" / "tokens.txt", CHUNK, LEFT, int8=True)
    return out, model


@pytest.mark.slow
def test_export_cli_writes_a_checked_sherpa_onnx_set(trained_tiny_model, tiny_corpus, tmp_path):
    exp_dir, epoch = trained_tiny_model
    cmd = [sys.executable, "-m", "zipformer_pc.export", "--exp-dir", str(exp_dir), "--epoch", str(epoch), "--avg", "1",
           "--tokens", str(tiny_corpus / "lang_bpe_120" / "tokens.txt"), "--chunk-size", str(CHUNK),
           "--left-context-frames", str(LEFT), "--output-dir", str(tmp_path), "--int8", "true"]
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-4000:]
    assert "ONNX vs PyTorch max relative errors" in r.stderr
    names = {p.name for p in tmp_path.iterdir()}
    for role in ("encoder", "decoder-P", "joiner-P", "decoder-N", "joiner-N"):
        assert f"{role}{SUFFIX}.onnx" in names and f"{role}{SUFFIX}.int8.onnx" in names
    assert "tokens.txt" in names
    assert set(find_model_files(tmp_path, int8=True)) == set(find_model_files(tmp_path)) == {
        "encoder", "decoder-P", "joiner-P", "decoder-N", "joiner-N", "tokens"}


@torch.no_grad()
def recipe_decoding(model, samples: np.ndarray, streaming: bool, method: str = "greedy_search",
                    blank_penalty: float = DEFAULT_BLANK_PENALTY):
    """PyTorch reference: what ``zipformer_pc.decoding.decode`` does with an
    utterance (the features of the audio alone, its tail silence added by
    ``encode_utterances``, chunked attention in one call or chunk by chunk),
    the search per mode.  Nothing here comes from the runtime."""
    feats = torch.from_numpy(knf_fbank(samples)).unsqueeze(0)
    enc_out, lens = encode_utterances(model.encoder, feats, torch.tensor([feats.size(1)]), CHUNK, LEFT,
                                      streaming=streaming)
    return {name: search(model, enc_out, lens, mode, method, beam=4, blank_penalty=blank_penalty)[0]
            for name, mode in (("P", MODE_P), ("N", MODE_N))}


@pytest.mark.slow
def test_onnx_streaming_equals_the_recipes_pytorch_decoding(exported, test_audio):
    """The runtime transcribes as the recipe's decoding scores: the same tokens to the last
    one (the end of a stream is where they used to differ: decoding masked the end of the
    utterance, a cue the runtime never has, and the final punctuation mark was lost),
    for utterances that end anywhere in a chunk, right at its end included.  The cut
    utterances end in 25 ms of silence (one analysis window): the runtime pads the stream
    with silent audio, as sherpa-onnx does, while the recipe appends silent feature frames to
    the features of the audio alone, so the frames whose windows overlap the end of loud
    speech differ between the two (log-mel by up to ~2.4; enough to change a token of the
    fixture model)."""
    out, model = exported
    rec = StreamingRecognizer.from_dir(out)
    torch.set_num_threads(1)
    chunk_samples = rec.decode_chunk_len * rec.frame_shift
    window = round(rec.sample_rate * rec.fbank_opts.frame_opts.frame_length_ms / 1000)  # 400 samples
    cases = list(test_audio)
    uid, x = test_audio[0]
    # the same speech cut to end right at a chunk boundary, one frame after it, and mid-chunk
    for cut in (4 * chunk_samples + 7 * rec.frame_shift, 4 * chunk_samples + 8 * rec.frame_shift,
                4 * chunk_samples + chunk_samples // 2):
        piece = x[:cut].copy()
        piece[-window:] = 0.0
        cases.append((f"{uid}[:{cut}]", piece))
    for uid, x in cases:
        s = decoded(rec, x)
        got = rec.get_tokens(s)
        assert got == recipe_decoding(model, x, streaming=False) == recipe_decoding(model, x, streaming=True), uid
        assert s.fbank.num_frames_ready - s.frame_offset < rec.T  # nothing left undecoded


@pytest.mark.slow
@pytest.mark.parametrize("method", ["greedy_search", "modified_beam_search"])
def test_the_blank_penalty_is_the_same_in_the_runtime_and_the_recipe(exported, test_audio, method):
    """``--blank-penalty`` of decode.py and of the runtime: the same tokens with and without one,
    and the penalty changes them (more tokens), so the agreement is not that of two searches
    that ignore it."""
    out, model = exported
    torch.set_num_threads(1)
    count = {}
    for penalty in (0.0, 2.0):
        rec = StreamingRecognizer.from_dir(out, decoding_method=method, blank_penalty=penalty)
        count[penalty] = 0
        for uid, x in test_audio:
            got = rec.get_tokens(decoded(rec, x))
            assert got == recipe_decoding(model, x, False, method, penalty), (uid, penalty)
            count[penalty] += sum(map(len, got.values()))
    assert count[2.0] > count[0.0] + 10, count


@pytest.mark.slow
def test_any_piece_size_gives_the_same_result(exported, test_audio):
    out, _ = exported
    rec = StreamingRecognizer.from_dir(out)
    uid, x = test_audio[0]
    whole = rec.recognize(x, 16000)
    for piece in (0.1, 0.37, 1.0):
        assert rec.recognize(x, 16000, piece_seconds=piece) == whole, piece
    # partial results grow as audio arrives, and end equal to the final one
    s = rec.create_stream()
    partial_lens = []
    for i in range(0, len(x), 1600):
        s.accept_waveform(16000, x[i : i + 1600])
        rec.decode_stream(s)
        partial_lens.append(len(rec.get_tokens(s)["P"]))
    assert partial_lens == sorted(partial_lens)
    s.input_finished()
    rec.decode_stream(s)
    assert rec.get_result(s) == whole


@pytest.mark.slow
def test_other_sample_rates_are_resampled(exported, test_audio):
    out, _ = exported
    rec = StreamingRecognizer.from_dir(out)
    uid, x = test_audio[0]
    r = Resampler(16000, 8000)
    x8 = np.concatenate([r.process(x), r.flush()])
    s = decoded(rec, x8, 8000)
    assert abs(s.duration - len(x) / 16000) < 0.01
    with pytest.raises(ValueError, match="sample rate changed"):
        s2 = rec.create_stream()
        s2.accept_waveform(8000, x8[:100])
        s2.accept_waveform(22050, x8[:100])


@pytest.mark.slow
@pytest.mark.parametrize("int8", [False, True], ids=["fp32", "int8"])
@pytest.mark.parametrize("mode", ["P", "N"])
def test_sherpa_onnx_gives_the_same_text(exported, test_audio, mode, int8):
    out, _ = exported
    files = find_model_files(out, int8=int8)
    rec = StreamingRecognizer(files)
    sherpa = sherpa_greedy_recognizer(files, mode, rec.blank_penalty)
    nonempty = 0
    for uid, x in test_audio:
        # Streams start with silence: the synthetic utterances start abruptly at
        # full level, where the first frames' features (window reflected at the
        # signal's start) differ slightly between kaldi-native-fbank's PyPI build
        # and the one inside sherpa-onnx.
        x = np.concatenate([np.zeros(4800, np.float32), x])
        ours = rec.recognize(x, 16000)[mode]
        assert ours == sherpa_text(sherpa, rec, x), uid  # the same tail padding
        nonempty += bool(ours)
    assert nonempty > 0, "the fixture model emits nothing: the comparison proves little"


@pytest.mark.slow
def test_cli_decodes_a_folder_of_wavs_and_a_cut_manifest(exported, test_audio, tiny_corpus, tmp_path):
    out, _ = exported
    for uid, x in test_audio[:2]:
        write_wav(tmp_path / f"{uid}.wav", x, 16000)
    r = subprocess.run([sys.executable, "-m", "zipformer_pc.transcribe", "--model-dir", str(out), str(tmp_path),
                        "--int8", "true", "--num-threads", "2"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    lines = r.stdout.splitlines()
    assert sum(line.split("\t")[0] in {u for u, _ in test_audio[:2]} for line in lines) == 2
    assert all("\tP: " in line and "\tN: " in line for line in lines[:2])
    assert lines[-1].startswith("RTF ")
    cuts = tiny_corpus / "fbank" / "synth_cuts_test.jsonl.gz"
    r = subprocess.run([sys.executable, "-m", "zipformer_pc.transcribe", "--model-dir", str(out), "--cuts", str(cuts),
                        "--max-utts", "3", "--per-speaker", "true", "--scores-json", str(tmp_path / "s.json")],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert any(line.startswith("P: wer") for line in r.stdout.splitlines())
    assert any(line.startswith("N: wer") for line in r.stdout.splitlines())
    from lhotse import load_manifest_lazy

    speakers = [c.supervisions[0].speaker for c, _ in zip(load_manifest_lazy(cuts), range(3))]
    scores = json.loads((tmp_path / "s.json").read_text())
    assert scores["utterances"] == 3 and sorted(scores["speakers"]) == sorted(set(speakers))
    assert sum(s["N"]["num_utts"] for s in scores["speakers"].values()) == 3
    for spk in set(speakers):  # one table row per speaker
        assert sum(line.startswith(f"| {spk} | {speakers.count(spk)} |") for line in r.stdout.splitlines()) == 1


def test_beam_search_with_one_path_is_greedy_search_and_more_paths_search_more(tmp_path, tokens_file):
    """Modified beam search keeping one path is greedy search (the same tokens at
    the same frames); with 4 paths the best path it reports scores at least
    as well as the greedy one, by the model's own log probabilities.
    (Parity with sherpa-onnx's beam search: tests/runtime/test_pretrained.py.)"""
    export_model(random_model("conditioned"), tmp_path, tokens_file, CHUNK, LEFT)
    x = np.random.default_rng(1).standard_normal(3 * 16000).astype(np.float32) * 0.1
    runs = {}
    for method, beam in (("greedy_search", 4), ("modified_beam_search", 1), ("modified_beam_search", 4)):
        rec = StreamingRecognizer.from_dir(tmp_path, decoding_method=method, beam=beam)
        s = decoded(rec, x)
        runs[method, beam] = {m: (list(h.tokens), list(h.frames)) for m, h in s.hyps.items()}
    greedy, one, four = runs["greedy_search", 4], runs["modified_beam_search", 1], runs["modified_beam_search", 4]
    assert greedy == one
    assert all(len(greedy[m][0]) >= 5 for m in ("P", "N")), greedy  # the random model emits
    assert four != greedy

    # score the paths: sum over frames of log p(token or blank | frame, context)
    import onnxruntime as ort

    files = find_model_files(tmp_path)
    rec = StreamingRecognizer(files)
    encs = []
    advance = rec._advance
    rec._advance = lambda s, enc, states: (encs.append(enc), advance(s, enc, states))  # keep each chunk's output
    rec.recognize(x, 16000)
    enc = np.concatenate(encs)

    def path_log_prob(mode, tokens, frames):
        dec = ort.InferenceSession(str(files[f"decoder-{mode}"]))
        joi = ort.InferenceSession(str(files[f"joiner-{mode}"]))
        at = dict(zip(frames, tokens))
        ctx, total = [0, 0], 0.0
        for t in range(enc.shape[0]):
            d = dec.run(None, {"y": np.array([ctx[-2:]], dtype=np.int64)})[0]
            logit = joi.run(None, {"encoder_out": enc[t : t + 1], "decoder_out": d})[0][0].astype(np.float64)
            logp = logit - logit.max() - np.log(np.exp(logit - logit.max()).sum())
            tok = at.get(t, 0)
            total += logp[tok]
            if tok:
                ctx.append(tok)
        return total

    for m in ("P", "N"):
        assert path_log_prob(m, *four[m]) >= path_log_prob(m, *greedy[m]) - 1e-6, m


def test_beam_search_fuses_each_modes_token_lm(tmp_path, tokens_file):
    """With ``lm_scale > 0`` modified beam search adds each mode's LM
    (``lm-MODE.arpa.gz`` beside the model) to every token's score before it
    prunes: an LM that knows two pieces only (every other one has log10
    probability -99) lets the P search emit nothing else, while N, which has
    no LM here, is searched as before.  The command-line options fuse the
    model dir's LMs by default in beam search only."""
    import argparse

    from zipformer_pc.lm import DEFAULT_LM_SCALE, NgramLm
    from zipformer_pc.runtime.recognizer import add_search_options, search_kwargs

    export_model(random_model("conditioned"), tmp_path, tokens_file, CHUNK, LEFT)
    x = np.random.default_rng(1).standard_normal(3 * 16000).astype(np.float32) * 0.1

    def tokens_of(rec):
        return {m: list(h.tokens) for m, h in decoded(rec, x).hyps.items()}

    plain = tokens_of(StreamingRecognizer.from_dir(tmp_path, decoding_method="modified_beam_search"))
    pieces = [line.split()[0] for line in open(tmp_path / "tokens.txt")]
    allowed = sorted({pieces[i] for i in plain["P"]})[:2]
    assert len(allowed) == 2 and len(set(plain["P"])) > 2, plain  # the random model emits several pieces
    NgramLm.train([allowed * 3, allowed[::-1] * 2], 2).write_arpa(tmp_path / "lm-P.arpa.gz")

    rec = StreamingRecognizer.from_dir(tmp_path, decoding_method="modified_beam_search", lm_scale=1.0,
                                       lm_token_bonus=20.0)
    assert set(rec.lms) == {"P"}
    fused = tokens_of(rec)
    assert fused["P"] and {pieces[i] for i in fused["P"]} <= set(allowed), fused
    assert fused["N"] == plain["N"]

    with pytest.raises(ValueError, match="modified_beam_search"):
        StreamingRecognizer.from_dir(tmp_path, lm_scale=0.5)
    with pytest.raises(FileNotFoundError, match="lm-MODE"):
        StreamingRecognizer.from_dir(tmp_path, modes=["N"], decoding_method="modified_beam_search", lm_scale=0.5)
    p = argparse.ArgumentParser()
    add_search_options(p)
    assert search_kwargs(p.parse_args([]), tmp_path)["lm_scale"] == 0.0
    beam = p.parse_args(["--decoding-method", "modified_beam_search"])
    assert search_kwargs(beam, tmp_path)["lm_scale"] == DEFAULT_LM_SCALE
    assert search_kwargs(beam, tmp_path / "elsewhere")["lm_scale"] == 0.0
    assert search_kwargs(p.parse_args(["--decoding-method", "modified_beam_search", "--lm-scale", "0"]),
                         tmp_path)["lm_scale"] == 0.0


def test_lodr_bigrams_beside_the_lms_are_subtracted_by_default(tmp_path, tokens_file):
    """LODR: with ``lodr-MODE.arpa.gz`` beside the LMs the options' defaults become the LODR ones
    (``fusion_defaults(True)``) and the recognizer subtracts the bigram; subtracting the LM itself at
    its own weight, with no bonus, gives the search without the LM.  Missing bigrams or LODR without
    an LM are refused."""
    import argparse

    from zipformer_pc.lm import LodrLm, NgramLm, fusion_defaults
    from zipformer_pc.runtime.recognizer import add_search_options, search_kwargs

    export_model(random_model("conditioned"), tmp_path, tokens_file, CHUNK, LEFT)
    x = np.random.default_rng(1).standard_normal(3 * 16000).astype(np.float32) * 0.1

    def tokens_of(rec):
        return {m: list(h.tokens) for m, h in decoded(rec, x).hyps.items()}

    beam = {"decoding_method": "modified_beam_search"}
    plain = tokens_of(StreamingRecognizer.from_dir(tmp_path, **beam))
    pieces = [line.split()[0] for line in open(tmp_path / "tokens.txt")]
    allowed = sorted({pieces[i] for i in plain["P"]})[:2]
    lm = NgramLm.train([allowed * 3, allowed[::-1] * 2], 2)
    lm.write_arpa(tmp_path / "lm-P.arpa.gz")
    fused = tokens_of(StreamingRecognizer.from_dir(tmp_path, lm_scale=1.0, lm_token_bonus=0.0, **beam))
    assert fused["P"] != plain["P"]  # the LM moves the search ...
    with pytest.raises(FileNotFoundError, match="lodr-MODE"):
        StreamingRecognizer.from_dir(tmp_path, lm_scale=1.0, lodr_scale=1.0, **beam)
    lm.write_arpa(tmp_path / "lodr-P.arpa.gz")
    rec = StreamingRecognizer.from_dir(tmp_path, lm_scale=1.0, lm_token_bonus=0.0, lodr_scale=1.0, **beam)
    assert isinstance(rec.lms["P"], LodrLm)
    assert tokens_of(rec) == plain  # ... and the same LM subtracted at its weight moves it back
    with pytest.raises(ValueError, match="lm_scale > 0"):
        StreamingRecognizer.from_dir(tmp_path, lodr_scale=0.25, **beam)
    p = argparse.ArgumentParser()
    add_search_options(p)
    kw = search_kwargs(p.parse_args(["--decoding-method", "modified_beam_search"]), tmp_path)
    assert (kw["lm_scale"], kw["lm_token_bonus"], kw["lodr_scale"]) == fusion_defaults(True)
    kw = search_kwargs(p.parse_args(["--decoding-method", "modified_beam_search", "--lodr-scale", "0"]), tmp_path)
    assert kw["lodr_scale"] == 0.0 and kw["lm_scale"] == fusion_defaults(True)[0]
    assert search_kwargs(p.parse_args([]), tmp_path)["lodr_scale"] == 0.0  # greedy search fuses nothing
    (tmp_path / "lodr-P.arpa.gz").unlink()
    kw = search_kwargs(p.parse_args(["--decoding-method", "modified_beam_search"]), tmp_path)
    assert (kw["lm_scale"], kw["lm_token_bonus"], kw["lodr_scale"]) == fusion_defaults(False)


def test_search_options_are_checked(tmp_path, tokens_file):
    export_model(random_model("punct"), tmp_path, tokens_file, CHUNK, LEFT)
    with pytest.raises(ValueError, match="decoding_method"):
        StreamingRecognizer.from_dir(tmp_path, decoding_method="beam")
    with pytest.raises(ValueError, match="beam"):
        StreamingRecognizer.from_dir(tmp_path, decoding_method="modified_beam_search", beam=0)
    with pytest.raises(ValueError, match="blank_penalty"):
        StreamingRecognizer.from_dir(tmp_path, blank_penalty=float("nan"))


@pytest.mark.parametrize("method", ["greedy_search", "modified_beam_search"])
def test_blank_penalty_lets_out_tokens_that_blank_beats(tmp_path, tokens_file, method):
    """The penalty moves blank only: one larger than any logit gap makes every frame emit (one token
    per frame), a negative one as large leaves nothing, in each mode; the option reaches the recognizer."""
    import argparse

    from zipformer_pc.runtime.recognizer import add_search_options, search_kwargs

    export_model(random_model("conditioned"), tmp_path, tokens_file, CHUNK, LEFT)
    x = np.random.default_rng(1).standard_normal(3 * 16000).astype(np.float32) * 0.1

    def hyps(penalty):
        return decoded(StreamingRecognizer.from_dir(tmp_path, decoding_method=method, blank_penalty=penalty), x).hyps

    plain, every, none = hyps(0.0), hyps(1e4), hyps(-1e4)
    for m in ("P", "N"):
        frames = every[m].frames
        assert len(frames) > 20 and frames == list(range(len(frames))), frames
        assert none[m].tokens == [] and len(plain[m].tokens) <= len(frames)
    p = argparse.ArgumentParser()
    add_search_options(p)
    assert search_kwargs(p.parse_args([]), tmp_path)["blank_penalty"] == DEFAULT_BLANK_PENALTY == 1.0
    assert search_kwargs(p.parse_args(["--blank-penalty", "1.5"]), tmp_path)["blank_penalty"] == 1.5
