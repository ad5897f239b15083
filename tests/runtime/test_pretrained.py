"""The shipped models in egs/synth/pretrained/ load, transcribe fresh speech and
can seed training (README, "Quick start"; issue: models that learn)."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from zipformer_pc.metrics import score_corpus
from zipformer_pc.text import normalized

ROOT = Path(__file__).resolve().parents[2]
PRETRAINED = ROOT / "egs" / "synth" / "pretrained"
# Austen-like, but not a sentence of the corpus (checked against its text).
SENTENCE = "When the letter came, she read it twice and then walked out into the garden."
VOICE = ["-v", "en-us+m1", "-s", "165"]  # a training voice of the synthetic corpus


def test_the_shipped_files_are_complete_and_within_budget():
    names = {p.name for p in PRETRAINED.iterdir()}
    for need in ("tokens.txt", "bpe.model", "norm.pt", "conditioned.pt", "MODEL_CARD.md", "lm-P.arpa.gz", "lm-N.arpa.gz",
                 "lodr-P.arpa.gz", "lodr-N.arpa.gz", "questions.json.gz"):
        assert need in names, need
    for part in ("encoder", "decoder-N", "decoder-P", "joiner-N", "joiner-P"):
        assert any(n.startswith(part) and n.endswith(".int8.onnx") for n in names), part
        assert any(n.startswith(part) and n.endswith(".onnx") and ".int8." not in n for n in names), part
    assert sum(p.stat().st_size for p in PRETRAINED.iterdir()) <= 60e6  # 60 MB of 10^6 bytes, the card included
    card = (PRETRAINED / "MODEL_CARD.md").read_text()
    assert "test_ood" in card and "PC-WER" in card and "Known limits" in card


@pytest.fixture(scope="module")
def spoken(tmp_path_factory):
    if shutil.which("espeak-ng") is None:
        pytest.fail("espeak-ng is missing: tools/setup_env.sh installs it")
    wav = tmp_path_factory.mktemp("spoken") / "letter.wav"
    subprocess.run(["espeak-ng", *VOICE, "-w", str(wav), SENTENCE], check=True, capture_output=True)
    return wav


@pytest.mark.parametrize("int8,search", [(False, []), (True, []), (False, ["--decoding-method", "modified_beam_search"])],
                         ids=["fp32", "int8", "beam-search-with-lms"])
def test_the_shipped_model_transcribes_a_fresh_sentence(spoken, int8, search, tmp_path):
    """The README's quick start: one command, both transcripts; the words are
    right, P starts with a capital and ends with a mark.  Beam search fuses
    the shipped token LMs by default, less the LODR bigrams."""
    out = tmp_path / "out.tsv"
    r = subprocess.run([sys.executable, "-m", "zipformer_pc.transcribe", "--model-dir", str(PRETRAINED), str(spoken),
                        "--int8", str(int8).lower(), "--output", str(out), *search],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert ("fuses the token LMs" in r.stderr) == bool(search), r.stderr[-3000:]
    assert ("LODR: less 0.25 x" in r.stderr) == bool(search), r.stderr[-3000:]  # the LODR bigrams too
    got = {}
    for line in out.read_text().splitlines():
        uid, mode, text = line.split("\t")
        got[mode] = text
    assert set(got) == {"P", "N"}, got
    ref_n = normalized(SENTENCE)
    wer = score_corpus([("letter", ref_n, got["N"])]).summary()["wer"]
    assert wer <= 25.0, (got, wer)
    assert normalized(got["P"]).split()[:3] == ref_n.split()[:3] or wer <= 10.0, got
    assert got["P"][:1].isupper(), got
    assert re.search(r"[.?!]$", got["P"]), got


def test_bad_inputs_are_clear_errors_or_counted_skips(spoken, tmp_path):
    """A missing path stops the run before the model loads, with one line naming it; a file that
    is not a wav is skipped with a warning and counted, the others are decoded; nothing decoded
    at all is an error (exit status 1), not an empty success."""
    run = lambda *a: subprocess.run([sys.executable, "-m", "zipformer_pc.transcribe", "--model-dir", str(PRETRAINED), *a],
                                    cwd=ROOT, capture_output=True, text=True, timeout=300)
    r = run(str(tmp_path / "missing.wav"))
    assert r.returncode == 1 and r.stderr.strip().splitlines()[-1] == f"error: {tmp_path / 'missing.wav'} does not exist"
    assert "Traceback" not in r.stderr
    bad = tmp_path / "notes.wav"
    bad.write_text("not audio")
    r = run(str(bad), str(spoken))
    assert r.returncode == 0, r.stderr[-3000:]
    assert "skipping notes: " in r.stderr and "1 skipped" in r.stderr and r.stdout.startswith("letter\tP: ")
    r = run(str(bad))
    assert r.returncode == 1 and "none of the 1 input(s) could be decoded" in r.stderr


# not a sentence of the corpus either; a question by its words
QUESTION = "Did you really think that she would come to the ball with him?"


def test_the_shipped_question_model_ends_a_spoken_question_with_a_question_mark(tmp_path):
    """The transducer writes a full stop after the question; the shipped question model
    (questions.json.gz, on by default) makes it ``?``, and ``--questions false`` shows P as searched."""
    wav = tmp_path / "question.wav"
    subprocess.run(["espeak-ng", *VOICE, "-w", str(wav), QUESTION], check=True, capture_output=True)
    got = {}
    for flag in ("true", "false"):
        out = tmp_path / f"{flag}.tsv"
        r = subprocess.run([sys.executable, "-m", "zipformer_pc.transcribe", "--model-dir", str(PRETRAINED), str(wav),
                            "--questions", flag, "--output", str(out)],
                           cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr[-3000:]
        got[flag] = dict(line.split("\t")[1:] for line in out.read_text().splitlines())
    assert score_corpus([("q", normalized(QUESTION), got["true"]["N"])]).summary()["wer"] <= 25.0, got
    assert got["true"]["P"].endswith("?") and got["false"]["P"].endswith("."), got
    assert got["true"]["P"][:-1] == got["false"]["P"][:-1] and got["true"]["N"] == got["false"]["N"]


def test_the_shipped_norm_weights_seed_training():
    """``train.py --init-from egs/synth/pretrained/norm.pt`` needs a model config
    and weights that load into the model it describes (N only: no P seen)."""
    import torch

    from zipformer_pc.model.transducer import build_model

    for name, model_type in (("norm", "norm"), ("conditioned", "conditioned")):
        ck = torch.load(PRETRAINED / f"{name}.pt", map_location="cpu", weights_only=False)
        model = build_model(ck["model_config"])
        assert model.model_type == model_type
        model.load_state_dict({k: v.float() if v.is_floating_point() else v for k, v in ck["model"].items()})
        assert ck["optimizer_steps"] > 1000, "the shipped weights must be trained"


def test_the_shipped_pytorch_model_writes_p_cased_and_punctuated_and_n_plain(spoken):
    """The PyTorch path (what decode.py runs: simulated streaming, greedy search) on the
    shipped ``conditioned.pt``: one encoder output, two predictor modes, two transcripts
    of the same words, only P with capitals and marks."""
    import torch

    from zipformer_pc.decoding.beam_search import search
    from zipformer_pc.data.tokenizer import Tokenizer
    from zipformer_pc.decoding.decode import streaming_encode
    from zipformer_pc.features import lhotse_fbank
    from zipformer_pc.model.transducer import build_model
    from zipformer_pc.modes import MODE_N, MODE_P
    from zipformer_pc.runtime import read_wav

    ck = torch.load(PRETRAINED / "conditioned.pt", map_location="cpu", weights_only=False)
    model = build_model(ck["model_config"]).eval()
    model.load_state_dict({k: v.float() if v.is_floating_point() else v for k, v in ck["model"].items()})
    samples, rate = read_wav(str(spoken))
    if rate != 16000:
        import torchaudio

        samples = torchaudio.functional.resample(torch.from_numpy(samples), rate, 16000).numpy()
    feats = torch.from_numpy(lhotse_fbank().extract(samples, 16000))[None]
    tok = Tokenizer(str(PRETRAINED / "bpe.model"))
    with torch.no_grad():
        enc, lens = streaming_encode(model.encoder, feats, torch.tensor([feats.size(1)]), 32, 128)
        text = {m: tok.decode(search(model, enc, lens, m, "greedy_search")[0]) for m in (MODE_P, MODE_N)}
    p, n = text[MODE_P], text[MODE_N]
    assert n == n.lower() and not re.search(r"[^\w\s']", n), text
    assert p[:1].isupper() and re.search(r"[.,?!;:]", p), text
    ref = normalized(SENTENCE)
    for hyp in (n, normalized(p)):
        assert score_corpus([("letter", ref, hyp)]).summary()["wer"] <= 25.0, text


def _speech_with_leading_silence(rec, wav):
    """The wav at the model's rate after 0.3 s of silence (as a stream from a microphone starts)."""
    import numpy as np

    from zipformer_pc.runtime import Resampler, read_wav

    samples, rate = read_wav(str(wav))
    if rate != rec.sample_rate:
        r = Resampler(rate, rec.sample_rate)
        samples = np.concatenate([r.process(samples), r.flush()])
    return np.concatenate([np.zeros(4800, np.float32), samples.astype(np.float32)])


def _sherpa_result(files, rec, x, mode: str, method: str):
    """sherpa-onnx's result for ``x`` with one mode's (encoder, decoder, joiner) triple."""
    import numpy as np
    import sherpa_onnx

    sherpa = sherpa_onnx.OnlineRecognizer.from_transducer(
        tokens=str(files["tokens"]), encoder=str(files["encoder"]), decoder=str(files[f"decoder-{mode}"]),
        joiner=str(files[f"joiner-{mode}"]), num_threads=1, sample_rate=rec.sample_rate, feature_dim=80,
        decoding_method=method, max_active_paths=4, blank_penalty=rec.blank_penalty)
    st = sherpa.create_stream()
    st.accept_waveform(rec.sample_rate, x)
    # our tail padding, plus the frame sherpa-onnx waits for before a chunk
    st.accept_waveform(rec.sample_rate, np.zeros((rec.tail_padding_frames(len(x), 0) + 1) * rec.frame_shift,
                                                 np.float32))
    st.input_finished()
    while sherpa.is_ready(st):
        sherpa.decode_stream(st)
    return sherpa.get_result(st), sherpa.get_result_all(st)


@pytest.mark.parametrize("int8", [False, True], ids=["fp32", "int8"])
def test_sherpa_onnx_reads_the_shipped_model_as_we_do(spoken, int8):
    """Parity on a model that really transcribes: each mode's (encoder, decoder,
    joiner) triple in sherpa-onnx gives our runtime's text, words and marks."""
    from zipformer_pc.runtime import StreamingRecognizer, find_model_files

    files = find_model_files(PRETRAINED, int8=int8)
    rec = StreamingRecognizer(files, questions=False)  # sherpa-onnx shows P as searched
    x = _speech_with_leading_silence(rec, spoken)
    ours = rec.recognize(x, rec.sample_rate)
    for mode in ("P", "N"):
        text, _ = _sherpa_result(files, rec, x, mode, "greedy_search")
        assert " ".join(text.split()) == ours[mode], mode
    assert len(ours["N"].split()) >= 10, ours


@pytest.mark.parametrize("int8", [False, True], ids=["fp32", "int8"])
def test_sherpa_onnx_beam_search_reads_the_shipped_model_as_we_do(spoken, int8):
    """``--decoding-method modified_beam_search`` is sherpa-onnx's (4 active paths):
    the same tokens at the same frames in each mode (int8: the same tokens; a
    near-tie may move a token by a frame between the two onnxruntime builds).
    The leading silence is where a path with a mark before the first word
    wins in both."""
    from zipformer_pc.runtime import StreamingRecognizer, find_model_files

    files = find_model_files(PRETRAINED, int8=int8)
    rec = StreamingRecognizer(files, decoding_method="modified_beam_search", beam=4, questions=False)
    x = _speech_with_leading_silence(rec, spoken)
    (seg,) = rec.recognize_segments(x, rec.sample_rate)
    for mode in ("P", "N"):
        _, theirs = _sherpa_result(files, rec, x, mode, "modified_beam_search")
        ours = seg.tokens[mode]
        assert [t.token.replace("\u2581", " ") for t in ours] == list(theirs.tokens), mode
        frames = [round(t.start / rec.frame_seconds) for t in ours]
        their_frames = [round(t / rec.frame_seconds) for t in theirs.timestamps]
        if int8:
            assert max(abs(a - b) for a, b in zip(frames, their_frames)) <= 1, mode
        else:
            assert frames == their_frames, mode
    assert len(seg.text["N"].split()) >= 10, seg.text


def test_the_shipped_encoder_is_finite_under_fp16_and_bf16_autocast(spoken):
    """Mixed precision, as a GPU run trains (--use-fp16): the shipped weights send
    Swoosh inputs far above 11, where an fp16 exp overflows; the encoder output
    must stay finite and equal the fp32 one to rounding (CPU autocast lowers the
    same operators to fp16 as CUDA's)."""
    import torch

    from zipformer_pc.features import lhotse_fbank
    from zipformer_pc.model.transducer import build_model
    from zipformer_pc.runtime import Resampler, read_wav

    ck = torch.load(PRETRAINED / "conditioned.pt", map_location="cpu", weights_only=False)
    model = build_model(ck["model_config"]).eval()
    model.load_state_dict({k: v.float() if v.is_floating_point() else v for k, v in ck["model"].items()})
    samples, rate = read_wav(str(spoken))
    if rate != 16000:
        r = Resampler(rate, 16000)
        samples = np.concatenate([r.process(samples), r.flush()])
    feats = torch.from_numpy(lhotse_fbank().extract(samples, 16000))[None]
    lens = torch.tensor([feats.size(1)])
    with torch.no_grad():
        ref, _ = model.encoder(feats, lens)
        for dtype in (torch.float16, torch.bfloat16):
            with torch.autocast("cpu", dtype=dtype):
                out, _ = model.encoder(feats, lens)
            out = out.float()
            assert torch.isfinite(out).all(), dtype
            cos = torch.nn.functional.cosine_similarity(out.flatten(), ref.flatten(), dim=0)
            assert cos > 0.999, (dtype, cos)
