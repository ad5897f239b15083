"""Reading and writing transcript files.

Four layouts are read:

* ``utt_id<TAB>text`` (or Kaldi's ``utt_id text``), one utterance a line; a
  line holding only an id is an empty transcript;
* icefall's ``recogs-*.txt``: pairs of lines ``utt_id:<TAB>ref=[...]`` and
  ``utt_id:<TAB>hyp=[...]`` whose lists are Python string lists;
* the runtime's ``--output``: ``utt_id<TAB>mode<TAB>text`` lines (every
  line's second field a mode name, P or N), read for one ``mode``;
* lhotse cut manifests (``*.jsonl.gz`` / ``*.jsonl``): the ``mode``
  reference of each cut (its supervisions' texts joined; N: ``text``, P:
  ``custom["text_p"]``, :mod:`zipformer_pc.data.references`); cuts without
  a P reference are skipped and counted in the log.

:func:`read_speakers` reads the speaker of each utterance from a cut manifest
or a Kaldi ``utt2spk`` file (scores per speaker).

Errors name the file and line; nothing is silently dropped.
"""

import ast
import logging
import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

from zipformer_pc.modes import MODE_IDS

_RECOGS_RE = re.compile(r"^(\S+):\t(ref|hyp)=(\[.*\])\s*$")


class TranscriptError(ValueError):
    pass


def is_cut_manifest(path) -> bool:
    """Whether ``path`` names a lhotse cut manifest (``.jsonl.gz`` / ``.jsonl``) rather than a text file."""
    return str(path).endswith((".jsonl.gz", ".jsonl"))


def _load_cuts(path) -> list:
    from lhotse import load_manifest_lazy

    try:
        return list(load_manifest_lazy(path))
    except Exception as e:  # lhotse raises several kinds for a file that is not a manifest
        raise TranscriptError(f"{path}: not a readable lhotse cut manifest: {e}") from None


def read_transcripts(path: str, side: str = "ref", mode: Optional[str] = None) -> Dict[str, str]:
    """Read a transcript file into ``{utt_id: text}`` (insertion-ordered).

    ``side`` selects the ``ref=`` or ``hyp=`` lines of an icefall recogs
    file; it is ignored for plain ``utt_id<TAB>text`` files.  ``mode`` (P or
    N) selects the lines of a runtime output file and the reference of a cut
    manifest; those two layouts need it.
    """
    if side not in ("ref", "hyp"):
        raise ValueError(f"side must be 'ref' or 'hyp', not {side!r}")
    if mode is not None and mode not in MODE_IDS:
        raise ValueError(f"mode must be one of {' '.join(MODE_IDS)}, not {mode!r}")
    if is_cut_manifest(path):
        return _read_cut_references(path, mode)
    out: Dict[str, str] = {}
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except UnicodeDecodeError as e:
        raise TranscriptError(f"{path}: not UTF-8 text (byte offset {e.start}): {e.reason}") from None
    if _is_mode_output(lines):
        return _read_mode_lines(path, lines, mode)
    is_recogs = any(_RECOGS_RE.match(ln) for ln in lines[:10] if ln.strip())
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        if is_recogs:
            m = _RECOGS_RE.match(line)
            if not m:
                raise TranscriptError(
                    f"{path}:{lineno}: not an icefall recogs line (expected 'id:\\tref=[...]'): {line[:80]!r}"
                )
            utt_id, which, payload = m.groups()
            if which != side:
                continue
            try:
                words = ast.literal_eval(payload)
            except (ValueError, SyntaxError) as e:
                raise TranscriptError(f"{path}:{lineno}: cannot parse token list: {e}") from None
            if not isinstance(words, list) or not all(isinstance(w, str) for w in words):
                raise TranscriptError(f"{path}:{lineno}: expected a list of strings")
            text = " ".join(words)
        else:
            if "\t" in line:
                utt_id, text = line.split("\t", 1)
            else:
                parts = line.split(None, 1)
                utt_id, text = parts[0], (parts[1] if len(parts) > 1 else "")
            utt_id = utt_id.strip()
            if not utt_id:
                raise TranscriptError(f"{path}:{lineno}: empty utterance id")
        if utt_id in out:
            raise TranscriptError(f"{path}:{lineno}: duplicate utterance id {utt_id!r}")
        out[utt_id] = text.strip()
    return out


def _is_mode_output(lines: List[str]) -> bool:
    """Whether every non-empty line is ``id<TAB>mode<TAB>text`` (the runtime's ``--output``)."""
    rows = [ln.split("\t", 2) for ln in lines if ln.strip()]
    return bool(rows) and all(len(r) == 3 and r[1] in MODE_IDS for r in rows)


def _read_mode_lines(path: str, lines: List[str], mode: Optional[str]) -> Dict[str, str]:
    if mode is None:
        found = sorted({ln.split("\t", 2)[1] for ln in lines if ln.strip()})
        raise TranscriptError(f"{path}: the runtime's 'id<TAB>mode<TAB>text' lines of modes {' '.join(found)}: "
                              "choose the mode to score (--mode)")
    out: Dict[str, str] = {}
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        utt_id, m, text = line.split("\t", 2)
        if m != mode:
            continue
        if utt_id in out:
            raise TranscriptError(f"{path}:{lineno}: duplicate utterance id {utt_id!r} for mode {mode}")
        out[utt_id] = text.strip()
    return out


def _read_cut_references(path: str, mode: Optional[str]) -> Dict[str, str]:
    """The ``mode`` references of the cuts of a lhotse manifest."""
    from zipformer_pc.data.references import get_n, get_p, has_p

    if mode is None:
        raise TranscriptError(f"{path}: a cut manifest holds P and N references: choose one (--mode)")
    out: Dict[str, str] = {}
    no_p = 0
    cuts = _load_cuts(path)
    for cut in cuts:
        if mode == "P" and not has_p(cut):
            no_p += 1
            continue
        texts = [get_p(s) if mode == "P" else get_n(s) for s in cut.supervisions]
        if cut.id in out:
            raise TranscriptError(f"{path}: duplicate cut id {cut.id!r}")
        out[cut.id] = " ".join(t for t in texts if t).strip()
    if no_p:
        logging.info(f"{path}: {no_p} of {len(cuts)} cuts have no P reference and are not scored")
    return out


def read_speakers(path: str) -> Dict[str, str]:
    """``{utt_id: speaker}`` from a lhotse cut manifest or a Kaldi ``utt2spk`` file.

    A cut's speaker is its supervisions' speakers (distinct ones joined by
    ``+``); a cut whose supervisions name none is an error, as is a line of
    ``utt2spk`` without a speaker or a repeated id.
    """
    out: Dict[str, str] = {}
    if is_cut_manifest(path):
        for cut in _load_cuts(path):
            speakers = list(dict.fromkeys(s.speaker for s in cut.supervisions if s.speaker))
            if not speakers:
                raise TranscriptError(f"{path}: cut {cut.id!r} names no speaker")
            if cut.id in out:
                raise TranscriptError(f"{path}: duplicate cut id {cut.id!r}")
            out[cut.id] = "+".join(speakers)
        return out
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            parts = line.split()
            if len(parts) != 2:
                raise TranscriptError(f"{path}:{lineno}: expected 'utt_id speaker': {line.strip()[:80]!r}")
            if parts[0] in out:
                raise TranscriptError(f"{path}:{lineno}: duplicate utterance id {parts[0]!r}")
            out[parts[0]] = parts[1]
    return out


def read_groups(path: str, fields: Sequence[str]) -> Dict[str, str]:
    """``{cut_id: group}`` of a lhotse cut manifest, the group being the values of
    ``fields`` joined by ``/``: ``speaker``, or a key of the supervisions'
    ``custom`` (e.g. ``source`` and ``kind`` of test_real: ``asterisk/word``).
    A cut lacking a field is an error that names it."""
    if not fields:
        raise ValueError("no field to group by")
    if not is_cut_manifest(path):
        raise TranscriptError(f"{path}: grouping by {'/'.join(fields)} needs a cut manifest")
    out: Dict[str, str] = {}
    for cut in _load_cuts(path):
        parts = []
        for field in fields:
            values = list(dict.fromkeys(
                (s.speaker if field == "speaker" else (s.custom or {}).get(field)) for s in cut.supervisions))
            if not values or any(v in (None, "") for v in values):
                raise TranscriptError(f"{path}: cut {cut.id!r} has no {field!r}")
            parts.append("+".join(str(v) for v in values))
        out[cut.id] = "/".join(parts)
    return out


@dataclass
class Pairing:
    """Reference/hypothesis triples and what did not pair up."""

    triples: List[Tuple[str, str, str]] = field(default_factory=list)
    missing_hyp: List[str] = field(default_factory=list)
    extra_hyp: List[str] = field(default_factory=list)


def pair_transcripts(refs: Dict[str, str], hyps: Dict[str, str]) -> Pairing:
    """Pair by utterance id in reference order.

    A reference without a hypothesis is scored against an empty one (all
    deletions: nothing recognized); a hypothesis without a reference cannot
    be scored and is reported.  Both are logged with counts.
    """
    p = Pairing()
    for utt_id, ref in refs.items():
        if utt_id in hyps:
            p.triples.append((utt_id, ref, hyps[utt_id]))
        else:
            p.missing_hyp.append(utt_id)
            p.triples.append((utt_id, ref, ""))
    p.extra_hyp = [u for u in hyps if u not in refs]
    if p.missing_hyp:
        logging.warning(
            f"{len(p.missing_hyp)} reference utterance(s) have no hypothesis and are scored "
            f"as empty output, e.g. {p.missing_hyp[:3]}"
        )
    if p.extra_hyp:
        logging.warning(
            f"{len(p.extra_hyp)} hypothesis utterance(s) have no reference and are not scored, "
            f"e.g. {p.extra_hyp[:3]}"
        )
    return p


def write_transcripts(path: str, items: List[Tuple[str, str]]) -> None:
    """Write ``utt_id<TAB>text`` lines."""
    with open(path, "w", encoding="utf-8") as f:
        for utt_id, text in items:
            if "\t" in utt_id or "\n" in utt_id or "\n" in text:
                raise TranscriptError(f"Cannot write utterance {utt_id!r}: tab or newline in id/text")
            f.write(f"{utt_id}\t{text}\n")
