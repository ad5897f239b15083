"""Where Whisper's CTranslate2 weights live on this machine: the one place that
knows the folder ``bash tools/setup_env.sh --whisper`` fills
(``<venv>/share/whisper/<name>``, ``$ZPC_WHISPER_DIR`` overriding the share
folder).  Used by ``scoring/whisper_score.py`` (the comparison rows) and
``local/pseudo_label.py`` (the teacher's transcripts).  Also the one sentence the
reports (the model card, RESULTS.md) write under Whisper's rows: where its RTF
was measured and whose text was reused (:func:`rtf_note`)."""

import os
import sys
from pathlib import Path
from typing import Dict, Iterable, Optional


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


def rtf_note(summaries: Iterable[Dict[str, object]]) -> str:
    """Where Whisper's RTF was measured and where its text came from, from whisper_score.py's N
    summaries (``rtf_machine``, ``text_from``): the RTF is that of the run that transcribed, so a
    stored run's text (``--reuse``) keeps its RTF and machine."""
    summaries = list(summaries)
    machines = sorted({str(s["rtf_machine"]) for s in summaries if s.get("rtf_machine")})
    stored = sorted({str(s["text_from"]) for s in summaries if s.get("text_from") not in (None, "transcribed")})
    where = f"on {'; '.join(machines)}" if machines else "on the machine that transcribed (not recorded)"
    note = f"Whisper's RTF as measured when it transcribed each set, {where}."
    if stored:
        note += (" The text of " + ", ".join(f"`{x}`" for x in stored) + " was transcribed by an earlier run "
                 "of the same audio, model and search and scored again here (`whisper_score.py --reuse`).")
    return note
