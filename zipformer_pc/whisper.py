"""Where Whisper's CTranslate2 weights live on this machine: the one place that
knows the folder ``bash tools/setup_env.sh --whisper`` fills
(``<venv>/share/whisper/<name>``, ``$ZPC_WHISPER_DIR`` overriding the share
folder).  Used by ``scoring/whisper_score.py`` (the comparison rows) and
``local/pseudo_label.py`` (the teacher's transcripts).  Also the one sentence the
reports (the model card, RESULTS.md) write about Whisper's rows: how it ran
(:func:`setup_note`, from the run's own summaries), where its RTF was measured and
whose text was reused (:func:`rtf_note`)."""

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


# how Whisper ran: kept in every whisper_score.py summary, read by setup_note
RUN_KEYS = ("backend", "compute", "beam_size", "threads")


def compute_type(device: str) -> str:
    """faster-whisper's precision on ``device``: int8 on a CPU, float16 on a GPU."""
    return "int8" if device == "cpu" else "float16"


def setup_note(summaries: Iterable[Dict[str, object]]) -> str:
    """How Whisper ran, from whisper_score.py's summaries (``backend``, ``compute``, ``beam_size``,
    ``threads``): 'faster-whisper (int8, beam 5, one thread)'; runs that differ are all named."""
    described = []
    for s in summaries:
        if not s.get("backend"):
            continue
        beam, threads = ("" if s.get(k) is None else str(s[k]) for k in ("beam_size", "threads"))
        parts = [str(s["compute"])] if s.get("compute") is not None else []
        if beam:
            parts.append("greedy search" if beam == "0" else f"beam {beam}")
        if threads:
            parts.append("one thread" if threads == "1" else f"{threads} threads")
        text = f"{s['backend']} ({', '.join(parts)})" if parts else str(s["backend"])
        if text not in described:
            described.append(text)
    return "; ".join(described) if described else "a Whisper back end (its settings not recorded)"


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
