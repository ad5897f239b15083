"""Where Whisper's CTranslate2 weights live on this machine: the one place that
knows the folder ``bash tools/setup_env.sh --whisper`` fills
(``<venv>/share/whisper/<name>``, ``$ZPC_WHISPER_DIR`` overriding the share
folder).  Used by ``scoring/whisper_score.py`` (the comparison rows) and
``local/pseudo_label.py`` (the teacher's transcripts)."""

import os
import sys
from pathlib import Path
from typing import Optional


def ct2_model_dir(name: str) -> Optional[Path]:
    """The CTranslate2 model directory ``name`` means, or None: a directory holding
    model.bin, or a size name (``base``) found under the share folder."""
    if os.path.isdir(name):
        return Path(name) if (Path(name) / "model.bin").is_file() else None
    if os.sep in name or name.endswith(".pt"):
        return None
    share = Path(os.getenv("ZPC_WHISPER_DIR") or Path(sys.prefix) / "share" / "whisper")
    d = share / name
    return d if (d / "model.bin").is_file() else None
