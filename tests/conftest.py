"""Shared fixtures (the tiny synthetic corpus, built once per test session) and the one place
that sets up imports for the tests.

The tests are grouped by area in folders (``tests/data/``, ``tests/model/``, ...; no
``__init__.py``: every test file's name is unique).  This file's folder, ``tests/``, is on
``sys.path`` (pytest puts it there to import this file), so a test imports its helpers with
``from conftest import ...``; the scripts of ``local/``, ``benchmarks/``, ``research/`` and
``scoring/`` are imported with :func:`local_module` and :func:`script_module`."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Seconds a test gives a subprocess that trains a model or runs a whole recipe.  Generous:
# `bash test.sh` runs two test processes side by side, and a busy 2-core machine runs
# these several times slower than an idle one (speed is measured by benchmarks, not tests).
TRAINING_TIMEOUT = 1800

# Test files that take minutes (trainings, end-to-end recipes), in the order they
# start.  `bash test.sh` runs whole files on two processes in collection order
# (--no-loadscope-reorder), each process starting with two files (the 1st and 3rd,
# the 2nd and 4th): the long ones first, the two longest (CI durations) on
# different processes, so that the quick files fill the gaps instead of a long one
# running alone at the end.  The 2nd needs no tiny corpus: it runs while the first
# process builds it.
# Paths relative to tests/.
LONG_FILES = ("training/test_train.py", "recipes/test_librispeech_e2e.py", "runtime/test_onnx.py",
              "recipes/test_recipe_synth.py", "recipes/test_pretrain.py", "data/test_synth_data.py",
              "training/test_finetune.py", "decoding/test_decode.py", "text/test_restore.py",
              "benchmarks/test_learning_curve.py", "data/test_custom_data.py", "data/test_real_speech.py")
TESTS = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config, items):
    missing = [f for f in LONG_FILES if not (TESTS / f).is_file()]
    assert not missing, f"tests/conftest.py's LONG_FILES names files that do not exist: {missing}"
    rank = {name: i for i, name in enumerate(LONG_FILES)}

    def key(item):
        try:
            return rank.get(item.path.resolve().relative_to(TESTS).as_posix(), len(LONG_FILES))
        except ValueError:  # a test outside tests/
            return len(LONG_FILES)

    items.sort(key=key)  # stable: in-file order kept


def built_once(tmp_path_factory, name: str, build) -> Path:
    """A directory ``build(dir)`` fills, made once per test run: per session, and with
    pytest-xdist (``bash test.sh`` runs the files on two processes) once for all
    workers, the first one building it under a file lock while the others wait for it.
    A failed build is not marked done, so the next worker tries again (and fails alike)."""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        out = tmp_path_factory.mktemp(name)
        build(out)
        return out
    from filelock import FileLock

    root = tmp_path_factory.getbasetemp().parent  # shared by the workers of this run
    out, done = root / name, root / f"{name}.done"
    with FileLock(str(root / f"{name}.lock")):
        if not done.exists():
            if out.exists():
                import shutil

                shutil.rmtree(out)
            out.mkdir()
            build(out)
            done.touch()
    return out


@pytest.fixture(scope="session")
def tiny_corpus(tmp_path_factory) -> Path:
    """``prepare.sh --size tiny`` into a temporary data dir; returns DATA_DIR/synth."""

    def build(data_dir: Path) -> None:
        r = subprocess.run(
            ["bash", "prepare.sh", "--size", "tiny", "--data-dir", str(data_dir)],
            cwd=ROOT, capture_output=True, text=True, timeout=900,
        )
        assert r.returncode == 0, f"prepare.sh --size tiny failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"

    return built_once(tmp_path_factory, "tiny_data", build) / "synth"


def write_librispeech_tree(root: Path, parts: dict, render) -> tuple:
    """A corpus in LibriSpeech's layout plus LibriSpeech-PC's manifests, under ``root``.

    ``parts`` maps a part (``test-clean``) to ``(utt id, LibriSpeech transcript,
    LibriSpeech-PC text or None when PC dropped the utterance)`` triples;
    ``render(flac_path, utt_id, pc_or_n_text)`` writes each utterance's 16 kHz
    FLAC.  Writes ``LibriSpeech/PART/SPK/CHAP/SPK-CHAP-NNNN.flac``, one
    ``SPK-CHAP.trans.txt`` per chapter, and ``LibriSpeech-PC/PART.json``: NeMo
    JSON lines with ``audio_filepath`` (relative to the corpus), ``duration``
    and ``text``.  Returns (corpus dir, PC dir)."""
    import soundfile as sf

    corpus = root / "LibriSpeech"
    pc_dir = root / "LibriSpeech-PC"
    pc_dir.mkdir(parents=True, exist_ok=True)
    for part, utts in parts.items():
        trans = {}
        pc_lines = []
        for utt_id, text, pc_text in utts:
            spk, chapter, _ = utt_id.split("-")
            d = corpus / part / spk / chapter
            d.mkdir(parents=True, exist_ok=True)
            flac = d / f"{utt_id}.flac"
            render(flac, utt_id, pc_text or text)
            trans.setdefault(d / f"{spk}-{chapter}.trans.txt", []).append(f"{utt_id} {text}")
            if pc_text is not None:
                pc_lines.append(json.dumps({"audio_filepath": f"{part}/{spk}/{chapter}/{utt_id}.flac",
                                            "duration": round(sf.info(str(flac)).duration, 3), "text": pc_text}))
        for path, lines in trans.items():
            path.write_text("\n".join(lines) + "\n")
        (pc_dir / f"{part}.json").write_text("".join(line + "\n" for line in pc_lines))
    return corpus, pc_dir


# Epochs for the decoding / export fixture model (its outputs need not be good:
# the tests check mechanics, not accuracy).
TRAINED_EPOCHS = 2


@pytest.fixture(scope="session")
def trained_tiny_model(tiny_corpus, tmp_path_factory):
    """A tiny conditioned model trained on the tiny corpus; returns (exp_dir, last epoch)."""
    import sys

    def build(exp_dir: Path) -> None:
        cmd = [
            sys.executable, "-m", "zipformer_pc.training.train", "--exp-dir", str(exp_dir),
            "--train-cuts", str(tiny_corpus / "fbank" / "synth_cuts_train_p1.jsonl.gz"),
            "--valid-cuts", str(tiny_corpus / "fbank" / "synth_cuts_dev.jsonl.gz"),
            "--bpe-model", str(tiny_corpus / "lang_bpe_120" / "bpe.model"),
            "--model-type", "conditioned", "--num-epochs", str(TRAINED_EPOCHS), "--max-duration", "60",
            "--spec-augment", "false", "--warmup-batches", "20", "--lr-batches", "1000", "--lr-epochs", "100",
            "--save-every-n", "100000", "--valid-interval", "100000", "--average-period", "1",
            "--tensorboard", "false", "--log-interval", "1000",
        ]
        r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=1800)
        assert r.returncode == 0, r.stderr[-4000:]

    return built_once(tmp_path_factory, "trained_tiny", build), TRAINED_EPOCHS


def local_module(name: str):
    """A data preparation script of local/ imported as a module; local/ goes on sys.path, since the
    scripts import their siblings (``from tts import ...``) as they do when run."""
    import importlib

    local = str(ROOT / "local")
    if local not in sys.path:
        sys.path.insert(0, local)
    return importlib.import_module(name)


def script_module(path: str):
    """A script of the repository (``"research/mix_grid.py"``) imported from its file as the
    module of its name (``mix_grid``), once per process; its folder does not go on sys.path (the
    scripts of benchmarks/, research/ and scoring/ import only the package and the library)."""
    import importlib.util

    name = Path(path).stem
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[name]
            raise
    return sys.modules[name]


def emitting_export(out: Path, model_type: str = "conditioned") -> Path:
    """A tiny random model whose joiners are re-weighted to emit on ~30% of the frames of
    speech-like audio (zipformer_pc.export.random_model), exported fp32 + int8 into ``out``."""
    from zipformer_pc.export.random_model import build_random_export, synthetic_utterance

    build_random_export(out, synthetic_utterance(3.0, seed=0), "tiny", model_type, vocab_size=67,
                        emit_fraction=0.3, left_context_frames=64, decoder_dim=64, joiner_dim=64, mode_dim=8)
    return out


@pytest.fixture(scope="session")
def tiny_onnx_model(tmp_path_factory) -> Path:
    """A directory with a tiny exported ``conditioned`` model (fp32 and int8) that emits
    tokens on speech-like audio (random weights: the text is gibberish, but deterministic)."""
    return emitting_export(tmp_path_factory.mktemp("tiny_onnx") / "onnx")


def speech_like(seconds: float, seed: int, rate: int = 16000):
    """The speech-like test signal of zipformer_pc.export.random_model (float32), resampled to ``rate``."""
    import numpy as np

    from zipformer_pc.runtime.audio import Resampler

    from zipformer_pc.export.random_model import synthetic_utterance

    x = synthetic_utterance(seconds, seed)
    if rate != 16000:
        r = Resampler(16000, rate)
        x = np.concatenate([r.process(x), r.flush()]).astype(np.float32)
    return x


def text_cut(cid: str, n: str, custom=None):
    """A one-second cut without audio, its supervision (same id) reading ``n``, with ``custom``."""
    from lhotse import MonoCut, SupervisionSegment

    sup = SupervisionSegment(id=cid, recording_id=cid, start=0, duration=1, text=n, custom=custom)
    return MonoCut(id=cid, start=0, duration=1, channel=0, supervisions=[sup])


def write_text_cuts(path: Path, rows) -> Path:
    """A cut manifest without audio: one :func:`text_cut` per ``(cut id, N text, P text or None)``,
    the P text (when given) in ``custom["text_p"]``."""
    from lhotse import CutSet

    CutSet.from_cuts(text_cut(cid, n, {"text_p": p} if p is not None else None) for cid, n, p in rows).to_file(path)
    return path


def write_wav(path: Path, samples, rate: int = 16000, channels: int = 1) -> None:
    """16-bit PCM wav of float ``samples`` in [-1, 1]: (T,) written to every channel, or (T, channels)."""
    import wave

    import numpy as np

    samples = np.asarray(samples)
    if samples.ndim == 1:
        samples = np.repeat(samples[:, None], channels, axis=1)
    assert samples.shape[1] == channels
    with wave.open(str(path), "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes((np.clip(samples, -1, 1) * 32767).astype("<i2").reshape(-1).tobytes())


@pytest.fixture(scope="session")
def scripted_model(tmp_path_factory):
    """A random tiny conditioned model (chunks of 16 frames) and its vocabulary, for
    tests that script what the search emits (:func:`scripted_search`)."""
    import torch

    from zipformer_pc.model.transducer import HeadConfig, build_model, make_model_config
    from zipformer_pc.export.onnx_export import export_model

    tmp = tmp_path_factory.mktemp("scripted_model")
    pieces = ["<blk>", "<sos/eos>", "<unk>", ",", ".", "\u2581She", "\u2581she", "\u2581read", "s", "\u2581it"]
    tokens = tmp / "tokens.txt"
    tokens.write_text("".join(f"{t} {i}\n" for i, t in enumerate(pieces)))
    torch.manual_seed(3)
    head = HeadConfig(model_type="conditioned", vocab_size=len(pieces), decoder_dim=32, joiner_dim=32)
    export_model(build_model(make_model_config("tiny", {}, head)).eval(), tmp / "onnx", tokens, 16, 64)
    return tmp / "onnx", pieces


def scripted_search(pieces, script, emitted=None):
    """A stand-in for the recognizer's greedy search that emits ``script[mode][frame]`` (the
    frames it emits on are appended to ``emitted``)."""
    def search(mode, enc, hyp, frame0):
        last = -1
        for f in range(frame0, frame0 + enc.shape[0]):
            if f in script[mode]:
                hyp.tokens.append(pieces.index(script[mode][f]))
                hyp.frames.append(f)
                if emitted is not None:
                    emitted.append(f)
                last = f
        return last
    return search


# ---------------------------------------------------------------------------
# the WebSocket server (zipformer_pc.server) as a process, for tests/server/test_server*.py

RULE2 = 0.5  # seconds of silence after speech that end a segment (the servers started below)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stats(port: int, gc: bool = False) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/stats" + ("?gc=1" if gc else ""), timeout=10) as r:
        return json.loads(r.read())


class ServerProcess:
    def __init__(self, model_dir: Path, *extra: str) -> None:
        self.port = _free_port()
        self.log = open(Path(os.environ.get("TMPDIR", "/tmp")) / f"zpc-server-{self.port}.log", "w+")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "zipformer_pc.server", "--model-dir", str(model_dir), "--host", "127.0.0.1",
             "--port", str(self.port), "--rule2-min-trailing-silence", str(RULE2), *extra],
            cwd=ROOT, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 120
        while True:
            try:
                self.baseline = _stats(self.port)
                break
            except OSError:
                if self.proc.poll() is not None or time.time() > deadline:
                    raise RuntimeError(f"the server did not start:\n{self.output()}")
                time.sleep(0.3)
        self.url = f"ws://127.0.0.1:{self.port}/ws"

    def output(self) -> str:
        if self.log.closed:
            return self.text
        self.log.flush()
        self.log.seek(0)
        return self.log.read()

    def stats(self, gc: bool = False) -> dict:
        return _stats(self.port, gc)

    def wait_idle(self, timeout: float = 20.0) -> dict:
        """Stats once every connection and stream is gone (the stream objects garbage-collected)."""
        deadline = time.time() + timeout
        while True:
            s = self.stats(gc=True)
            if s["connections"] == 0 and s["streams"] == 0 and s["live_stream_objects"] == 0:
                return s
            if time.time() > deadline:
                raise AssertionError(f"the server did not return to idle: {s}")
            time.sleep(0.2)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if not self.log.closed:
            self.text = self.output()
            self.log.close()


def make_it_emit(model, feats, fraction: float = 0.3, seed: int = 0) -> None:
    """Replace every joiner's output layer so it emits tokens on about
    ``fraction`` of the frames of ``feats`` ((T, 80) or (1, T, 80)), as
    calibrated with the initial predictor context (once tokens are emitted the
    context moves the rate, and one token may win most frames).

    The fixture model is trained for seconds: it outputs blanks (or only the
    word boundary), and comparing empty transcripts would prove nothing.
    Parity needs only *some* fixed weights, so the parity tests keep the
    trained encoder, predictor and joiner projections and give the output
    layer seeded random weights applied to the deviation of the joiner's
    hidden vector from its mean over ``feats`` (so the token depends on
    the frame), with the blank bias set for the wanted emission rate.  Only
    8 tokens besides blank can win (never ``<unk>``, which the runtime, like
    sherpa-onnx, reads as blank while PyTorch search does not)."""
    import torch

    from zipformer_pc.modes import MODE_P

    g = torch.Generator().manual_seed(seed)
    feats = feats.reshape(1, -1, feats.size(-1))
    with torch.no_grad():
        enc, _ = model.encoder(feats, torch.tensor([feats.size(1)]))
        for name, joiner in model.joiners.items():
            decoder = model.decoders[name]
            mode = MODE_P if decoder.conditioned else None
            dec = joiner.decoder_proj(decoder(torch.zeros(1, model.cfg.context_size, dtype=torch.long), mode=mode,
                                              need_pad=False)[:, -1])
            hidden = torch.tanh(joiner.encoder_proj(enc[0]) + dec)  # (T, joiner_dim)
            centred = hidden - hidden.mean(dim=0)
            w = torch.randn(joiner.output_linear.weight.shape, generator=g) / float(centred.std())
            # a few candidate tokens, so the winner usually leads by a clear margin (near-ties
            # could flip under the rounding differences of two onnxruntime builds)
            candidates = torch.zeros(w.size(0), dtype=torch.bool)
            candidates[torch.randperm(w.size(0) - 3, generator=g)[:8] + 3] = True
            candidates[0] = True
            w[~candidates] = 0.0
            joiner.output_linear.weight.copy_(w)
            joiner.output_linear.bias.copy_(-w @ hidden.mean(dim=0))
            joiner.output_linear.bias[~candidates] = -1e4
            logits = centred @ w.t() - 1e4 * (~candidates).float()
            margin = logits[:, 0] - logits[:, 1:].max(dim=-1).values
            joiner.output_linear.bias[0] -= float(torch.quantile(margin, 1 - fraction))
