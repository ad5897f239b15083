"""The streaming runtime (zipformer_pc.runtime) with torch and lhotse unavailable.

Deployment installs only onnxruntime, numpy and kaldi-native-fbank (and
sentencepiece for the restoration model), so nothing on the runtime's import
path may import torch or lhotse.  The checks run in a subprocess whose
``sys.meta_path`` starts with a finder that refuses those packages.
"""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import write_wav

ROOT = Path(__file__).resolve().parents[2]

BLOCKER = """
import importlib.abc, sys

class _Blocked(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("torch", "torchaudio", "lhotse"):
            raise ImportError(f"{name} is blocked: the runtime must not need it")
        return None

sys.meta_path.insert(0, _Blocked())
"""


def _run_blocked(code: str, *args: str) -> subprocess.CompletedProcess:
    r = subprocess.run([sys.executable, "-c", BLOCKER + code, *args], cwd=ROOT, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, f"stdout:\n{r.stdout[-3000:]}\nstderr:\n{r.stderr[-3000:]}"
    return r


def test_the_blocker_blocks():
    r = subprocess.run([sys.executable, "-c", BLOCKER + "import torch"], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "blocked" in r.stderr


def test_every_runtime_module_imports_without_torch_or_lhotse():
    code = """
import importlib, pkgutil
import zipformer_pc.runtime as rt
names = ["zipformer_pc.modes", "zipformer_pc.features", "zipformer_pc.text"]
names += [f"zipformer_pc.runtime.{m.name}" for m in pkgutil.iter_modules(rt.__path__)]
import zipformer_pc.server as srv  # the WebSocket server and its client: aiohttp, nothing heavy
names += [f"zipformer_pc.server.{m.name}" for m in pkgutil.iter_modules(srv.__path__)]
for n in names:
    importlib.import_module(n)
from zipformer_pc.features import FBANK_OPTIONS, knf_fbank, knf_fbank_options, options_from_metadata, options_to_metadata
from zipformer_pc.runtime import Resampler, fbank_options_from_metadata
opts = fbank_options_from_metadata(options_to_metadata())
assert opts.mel_opts.num_bins == FBANK_OPTIONS["num_mel_bins"] and not opts.frame_opts.snip_edges
assert options_from_metadata(options_to_metadata()) == FBANK_OPTIONS
import numpy as np
x = np.sin(np.arange(8000) / 8000 * 2 * np.pi * 440).astype(np.float32)
r = Resampler(8000, 16000)
assert len(np.concatenate([r.process(x), r.flush()])) == 16000
assert knf_fbank(np.zeros(16000, np.float32)).shape == (100, FBANK_OPTIONS["num_mel_bins"])
print(" ".join(names))
"""
    r = _run_blocked(code)
    for m in ("audio", "cli", "recognizer", "restoration", "stream"):
        assert f"zipformer_pc.runtime.{m}" in r.stdout.split()
    for m in ("app", "client", "__main__"):
        assert f"zipformer_pc.server.{m}" in r.stdout.split()


@pytest.mark.slow
def test_recognizer_and_cli_run_without_torch_or_lhotse(tmp_path):
    """A tiny random ``punct`` model (its N is derived from P through zipformer_pc.text): the
    blocked process gives the transcripts this process gives, through the API and the CLI."""
    import torch

    from zipformer_pc.model.transducer import HeadConfig, build_model, make_model_config
    from zipformer_pc.export.onnx_export import export_model
    from zipformer_pc.runtime import StreamingRecognizer

    vocab = 40
    tokens = tmp_path / "tokens.txt"
    tokens.write_text("".join(f"{t} {i}\n" for i, t in enumerate(
        ["<blk>", "<sos/eos>", "<unk>"] + [f"\u2581{'Ab'[i % 2]}{i}{',.?'[i % 3]}" for i in range(3, vocab)])))
    torch.manual_seed(0)
    head = HeadConfig(model_type="punct", vocab_size=vocab, decoder_dim=32, joiner_dim=32)
    model = build_model(make_model_config("tiny", {}, head)).eval()
    with torch.no_grad():  # blank, <sos/eos> and <unk> never win: the random model writes a piece every frame
        model.joiners["main"].output_linear.bias[:3] = -1e4
    out = tmp_path / "onnx"
    export_model(model, out, tokens, 32, 64)
    rate = 22050  # resampled to 16 kHz by the runtime
    t = np.arange(int(1.7 * rate)) / rate
    audio = (0.3 * np.sin(2 * np.pi * 180 * t * (1 + 0.2 * np.sin(3 * t))) * (0.6 + 0.4 * np.sin(2 * np.pi * 4 * t)))
    audio = audio.astype(np.float32)
    wav = tmp_path / "utt.wav"
    write_wav(wav, audio, rate)

    from zipformer_pc.runtime import read_wav

    samples, sr = read_wav(str(wav))
    expected = StreamingRecognizer.from_dir(out).recognize(samples, sr, 0.1)
    assert list(expected) == ["P", "N"] and expected["P"], expected  # the model emits: the check means something

    code = """
import json, sys
from zipformer_pc.runtime import StreamingRecognizer, read_wav
from zipformer_pc.runtime.cli import main
samples, rate = read_wav(sys.argv[2])
print(json.dumps(StreamingRecognizer.from_dir(sys.argv[1]).recognize(samples, rate, 0.1)))
main(["--model-dir", sys.argv[1], "--output", sys.argv[3], sys.argv[2]])
heavy = [k for k in sys.modules if k.split(".")[0] in ("torch", "torchaudio", "lhotse")]
assert not heavy, heavy
"""
    tsv = tmp_path / "out.tsv"
    r = _run_blocked(code, str(out), str(wav), str(tsv))
    assert json.loads(r.stdout.splitlines()[0]) == expected
    assert "RTF " in r.stdout
    assert tsv.read_text().splitlines() == [f"utt\t{m}\t{expected[m]}" for m in ("P", "N")]
