#!/usr/bin/env python3
"""Manifests of your own recordings: a folder of audio files with a transcript
file, split into train, dev and test (``prepare.sh --dataset custom``).

Usage:
  ./local/prepare_custom.py --custom-dir DIR --manifest-dir data/custom/manifests
  ./local/prepare_custom.py --custom-dir DIR/validated.tsv --manifest-dir data/custom/manifests \\
      --seed 7 --dev-share 0.1 --test-share 0.1
  ./local/prepare_custom.py --custom-dir DIR --fingerprint true   # prints a hash of the transcript files

``--custom-dir`` is the folder holding the transcript file(s), or one
transcript file.  The layout is found from the files, in this order:

* ``kaldi``: ``text`` (``UTT-ID words ...``) and ``wav.scp``
  (``UTT-ID path``), optional ``utt2spk`` (``UTT-ID SPEAKER``); one
  utterance per audio file (a ``segments`` file is refused).
* ``nemo``: ``*.json`` / ``*.jsonl`` JSON lines with ``audio_filepath`` and
  ``text`` (``duration`` is read from the audio instead), optional
  ``speaker``: NeMo's manifests, LibriSpeech-PC's.
* ``csv``: ``*.csv`` (comma) or ``*.tsv`` (tab) with a header naming the
  audio column ``path`` (or ``audio``, ``audio_filepath``, ``file``,
  ``filename``, ``wav``, ``wav_filename``), the text column ``text`` (or
  ``sentence``, ``transcript``, ``transcription``) and optionally a speaker
  column ``speaker`` (or ``speaker_id``, ``client_id``): Common Voice's
  ``validated.tsv`` reads as it is (its ``invalidated.tsv`` and ``other.tsv``
  are skipped, their clips were not validated).

Every transcript file of the layout found is read; an audio file named twice
is kept once.  A relative audio path is resolved against the transcript
file's folder (``--audio-dir``: against that folder instead), and for CSV also
against its ``clips/`` subfolder (Common Voice).

References: a transcript with capitals and marks ("Hello world, how are
you?") gives P and N, a transcript without (``hello world how are you``,
``HELLO WORLD``) gives N only; N is always derived by the one normalization
(``zipformer_pc.text``), P keeps ``. , ?`` and writes ``!`` as ``.``, as the
shipped models' synthetic corpus does (``SYNTH_PUNCT``).  A row whose audio
file is missing, unreadable or empty, whose text has no words, or whose id or
audio file came before, is logged, counted by reason and skipped.

The split is deterministic for a ``--seed``: with 3 speakers or more (every
utterance naming one) it is by speaker, so that no dev or test speaker is in
train: speakers ranked by a hash of seed and name fill test, then dev, up to
about their share of the utterances each (a speaker above 1.5 times the share
only when no smaller one is left), and at least one speaker each; otherwise
by utterance, ranked the same way, at least one utterance each.

Writes ``custom_recordings_{train,dev,test}.jsonl.gz`` and
``custom_supervisions_{train,dev,test}.jsonl.gz`` (speaker, ``custom["layout"]``,
``custom["source"]``: the transcript file) and ``custom_prep.json`` (the
counts) to ``--manifest-dir``, and prints the counts per transcript file and
per split as Markdown.
"""

import argparse
import csv
import hashlib
import json
import logging
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from zipformer_pc.data.references import SYNTH_PUNCT, is_punctuated_source, reference_fields
from zipformer_pc.logs import setup_logging

PREFIX = "custom"
SPLITS = ("train", "dev", "test")
LAYOUTS = ("kaldi", "nemo", "csv")
PATH_COLUMNS = ("path", "audio", "audio_filepath", "audio_path", "file", "filename", "wav", "wav_filename")
TEXT_COLUMNS = ("text", "sentence", "transcript", "transcription")
SPEAKER_COLUMNS = ("speaker", "speaker_id", "client_id")
# Common Voice's tables of clips that were not validated
SKIPPED_TABLES = ("invalidated", "other")
MIN_SPEAKERS = 3  # a split by speaker needs one for each of train, dev and test


@dataclass
class Row:
    """One utterance as the transcript file gives it."""
    uid: str  # the id it names, or the audio file's stem
    audio: str  # the audio path as written
    text: str
    speaker: Optional[str]
    source: Path  # the transcript file
    where: str  # file:line, for messages


# ----------------------------------------------------------------- layouts
def _first_json_object(path: Path) -> Optional[dict]:
    try:
        with open(path, encoding="utf-8-sig") as f:
            for line in f:
                if line.strip():
                    item = json.loads(line)
                    return item if isinstance(item, dict) else None
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    return None


def _is_nemo(path: Path) -> bool:
    item = _first_json_object(path)
    return item is not None and "audio_filepath" in item and "text" in item


def _csv_header(path: Path) -> Optional[List[str]]:
    try:
        with open(path, encoding="utf-8-sig", newline="") as f:
            line = f.readline()
    except (OSError, UnicodeDecodeError):
        return None
    delim = "\t" if path.suffix.lower() == ".tsv" or "\t" in line else ","
    return [c.strip().lower() for c in next(csv.reader([line], delimiter=delim), [])]


def _column(header: Sequence[str], names: Sequence[str]) -> Optional[int]:
    for name in names:
        if name in header:
            return list(header).index(name)
    return None


def _is_csv(path: Path) -> bool:
    header = _csv_header(path)
    return header is not None and _column(header, PATH_COLUMNS) is not None \
        and _column(header, TEXT_COLUMNS) is not None


def detect_layout(custom: Path) -> Tuple[str, List[Path]]:
    """(layout, transcript files) of a folder or a transcript file; SystemExit when none is found."""
    custom = Path(custom)
    if not custom.exists():
        raise SystemExit(f"prepare_custom.py: {custom} does not exist")
    if custom.is_file():
        if custom.name in ("text", "wav.scp", "utt2spk"):
            return detect_layout(custom.parent)
        if custom.suffix.lower() in (".json", ".jsonl") and _is_nemo(custom):
            return "nemo", [custom]
        if custom.suffix.lower() in (".csv", ".tsv") and _is_csv(custom):
            return "csv", [custom]
        raise SystemExit(f"prepare_custom.py: {custom} is not a transcript file of a known layout: "
                         "a NeMo manifest (*.json lines with audio_filepath and text) or a CSV/TSV with a "
                         f"header naming a path column ({'/'.join(PATH_COLUMNS[:2])}...) and a text column "
                         f"({'/'.join(TEXT_COLUMNS[:2])}...)")
    found: Dict[str, List[Path]] = {}
    if (custom / "text").is_file() and (custom / "wav.scp").is_file():
        found["kaldi"] = [custom / "text"]
    nemo = [p for p in sorted(custom.iterdir()) if p.suffix.lower() in (".json", ".jsonl") and _is_nemo(p)]
    if nemo:
        found["nemo"] = nemo
    tables = [p for p in sorted(custom.iterdir()) if p.suffix.lower() in (".csv", ".tsv") and _is_csv(p)]
    skipped = [p for p in tables if p.stem.lower() in SKIPPED_TABLES]
    if skipped:
        logging.info(f"Not read (clips that were not validated): {', '.join(p.name for p in skipped)}")
    tables = [p for p in tables if p not in skipped]
    if tables:
        found["csv"] = tables
    if not found:
        raise SystemExit(
            f"prepare_custom.py: no transcript file in {custom}: expected one of three layouts: Kaldi "
            "(text + wav.scp, optional utt2spk), a NeMo manifest (*.json lines with audio_filepath and text) "
            f"or a CSV/TSV with a header naming a path column ({', '.join(PATH_COLUMNS)}) and a text column "
            f"({', '.join(TEXT_COLUMNS)})")
    layout = next(name for name in LAYOUTS if name in found)
    if len(found) > 1:
        logging.warning(f"{custom} holds transcript files of several layouts ({', '.join(found)}): reading the "
                        f"{layout} one; name a transcript file in --custom-dir to read another")
    return layout, found[layout]


def fingerprint(layout: str, files: Sequence[Path]) -> str:
    """A hash of the layout and its transcript files' names and contents (prepare.sh's done marker:
    a transcript edited, a file added, and the data is prepared again)."""
    h = hashlib.sha256(layout.encode())
    if layout == "kaldi":
        folder = files[0].parent
        files = [folder / n for n in ("text", "wav.scp", "utt2spk") if (folder / n).is_file()]
    for p in files:
        h.update(str(p.resolve()).encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def _kaldi_table(path: Path) -> Dict[str, Tuple[str, int]]:
    """``{key: (rest of the line, line number)}`` of a Kaldi table file (the first of a key wins)."""
    out: Dict[str, Tuple[str, int]] = {}
    with open(path, encoding="utf-8-sig") as f:
        for lineno, line in enumerate(f, 1):
            parts = line.strip().split(maxsplit=1)
            if parts and parts[0] not in out:
                out[parts[0]] = (parts[1] if len(parts) > 1 else "", lineno)
    return out


def read_kaldi(text_file: Path, drops: Counter) -> List[Row]:
    folder = text_file.parent
    if (folder / "segments").is_file():
        raise SystemExit(f"prepare_custom.py: {folder}/segments: several utterances per recording are not "
                         "supported; give one audio file per utterance")
    texts = _kaldi_table(text_file)
    wavs = _kaldi_table(folder / "wav.scp")
    spk = _kaldi_table(folder / "utt2spk") if (folder / "utt2spk").is_file() else {}
    rows = []
    for uid, (text, lineno) in texts.items():
        where = f"{text_file}:{lineno}"
        if uid not in wavs:
            drops["no line in wav.scp"] += 1
            logging.warning(f"{where}: skipping {uid}: wav.scp has no line for it")
            continue
        audio = wavs[uid][0].strip()
        if audio.endswith("|"):
            drops["a command in wav.scp, not a file"] += 1
            logging.warning(f"{where}: skipping {uid}: wav.scp gives a command ({audio[:60]}), not a file")
            continue
        speaker = (spk[uid][0].strip() or None) if uid in spk else None
        rows.append(Row(uid, audio, text, speaker, text_file, where))
    missing = len(set(wavs) - set(texts))
    if missing:
        drops["audio without a transcript (wav.scp)"] += missing
        logging.warning(f"{folder}/wav.scp: {missing} recordings have no line in text: skipped")
    return rows


def read_nemo(path: Path, drops: Counter) -> List[Row]:
    rows = []
    with open(path, encoding="utf-8-sig") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"{path}:{lineno}"
            try:
                item = json.loads(line)
                audio, text = item["audio_filepath"], item["text"]
                if not isinstance(audio, str) or not isinstance(text, str):
                    raise TypeError("audio_filepath and text must be strings")
            except (ValueError, KeyError, TypeError) as e:
                drops["malformed line"] += 1
                logging.warning(f"{where}: skipping a malformed line ({type(e).__name__}: {e})")
                continue
            speaker = item.get("speaker")
            speaker = str(speaker) if speaker not in (None, "") else None
            rows.append(Row(Path(audio).stem, audio, text, speaker, path, where))
    return rows


def read_csv(path: Path, drops: Counter) -> List[Row]:
    tsv = path.suffix.lower() == ".tsv"
    with open(path, encoding="utf-8-sig", newline="") as f:
        first = f.readline()
        delim = "\t" if tsv or "\t" in first else ","
        header = [c.strip().lower() for c in next(csv.reader([first], delimiter=delim))]
        col_path, col_text = _column(header, PATH_COLUMNS), _column(header, TEXT_COLUMNS)
        col_spk = _column(header, SPEAKER_COLUMNS)
        reader = csv.reader(f, delimiter=delim, quoting=csv.QUOTE_NONE if tsv else csv.QUOTE_MINIMAL)
        rows = []
        for lineno, fields in enumerate(reader, 2):
            if not any(x.strip() for x in fields):
                continue
            where = f"{path}:{lineno}"
            if len(fields) <= max(col_path, col_text):
                drops["malformed line"] += 1
                logging.warning(f"{where}: skipping a line with {len(fields)} fields (the header has {len(header)})")
                continue
            speaker = fields[col_spk].strip() if col_spk is not None and col_spk < len(fields) else ""
            audio = fields[col_path].strip()
            rows.append(Row(Path(audio).stem, audio, fields[col_text], speaker or None, path, where))
    return rows


READERS = {"kaldi": read_kaldi, "nemo": read_nemo, "csv": read_csv}


# ------------------------------------------------------------ utterances
def resolve_audio(row: Row, layout: str, audio_dir: Optional[Path]) -> Optional[Path]:
    """The audio file of a row (None when there is none)."""
    p = Path(row.audio).expanduser()
    if p.is_absolute():
        return p if p.is_file() else None
    base = audio_dir or row.source.parent
    candidates = [base / p] + ([base / "clips" / p] if layout == "csv" else [])
    return next((c for c in candidates if c.is_file()), None)


def collect(custom: Path, audio_dir: Optional[Path] = None, progress_every: float = 10.0) -> Dict:
    """Read every row of the layout found under ``custom``: the kept utterances
    (``utts``: id, path, refs, speaker, source, duration, recording), the
    ``layout``, its ``files``, per-file ``counts`` and the ``drops`` by reason."""
    from lhotse import Recording

    layout, files = detect_layout(custom)
    logging.info(f"Layout: {layout} ({', '.join(str(p) for p in files)})")
    drops: Counter = Counter()
    utts: List[Dict] = []
    counts: Dict[str, Dict[str, int]] = {}
    seen_ids, seen_audio = set(), set()
    last_log = time.time()
    for path in files:
        file_drops: Counter = Counter()
        rows = READERS[layout](path, file_drops)
        kept = 0
        for i, row in enumerate(rows, 1):
            reason = None
            audio = resolve_audio(row, layout, audio_dir)
            refs = None
            uid = row.uid
            if audio is None:
                reason = "missing audio file"
            elif audio.resolve() in seen_audio:
                reason = "audio file named before"
            else:
                punct = is_punctuated_source(row.text)
                refs = reference_fields(row.text if punct else None, None if punct else row.text, SYNTH_PUNCT)
                if not refs["text"]:
                    reason = "no words in the text"
            if reason is None and uid in seen_ids:
                if layout == "kaldi":
                    reason = "id named before"
                else:  # two files of the same name in different folders
                    n = 2
                    while f"{row.uid}-{n}" in seen_ids:
                        n += 1
                    uid = f"{row.uid}-{n}"
            rec = None
            if reason is None:
                try:
                    rec = Recording.from_file(audio, recording_id=uid)
                    if rec.duration <= 0 or rec.num_samples <= 0:
                        reason = "empty audio"
                except Exception as e:  # any reader error: the row is skipped, never the run
                    reason = "unreadable audio"
                    logging.warning(f"{row.where}: {audio}: {type(e).__name__}: {str(e).strip()[:200]}")
            if reason is not None:
                file_drops[reason] += 1
                logging.warning(f"{row.where}: skipping {row.uid}: {reason} ({row.audio})")
            else:
                seen_ids.add(uid)
                seen_audio.add(audio.resolve())
                kept += 1
                utts.append(dict(id=uid, path=audio, refs=refs, speaker=row.speaker, source=path.name,
                                 duration=rec.duration, recording=rec))
            if time.time() - last_log >= progress_every:
                last_log = time.time()
                logging.info(f"{path.name}: {i} of {len(rows)} rows read, {kept} kept")
        skipped = sum(file_drops.values())
        counts[path.name] = {"rows": kept + skipped, "kept": kept, "skipped": skipped}
        logging.info(f"{path.name}: {kept + skipped} rows, {kept} kept, {skipped} skipped")
        drops.update(file_drops)
    return dict(layout=layout, files=files, utts=utts, counts=counts, drops=drops)


# ----------------------------------------------------------------- split
def _rank(seed: int, name: str) -> bytes:
    return hashlib.sha256(f"{seed}:{name}".encode()).digest()


def _share_count(share: float, total: int) -> int:
    return max(1, round(share * total))


def split_utterances(utts: Sequence[Dict], seed: int, dev_share: float = 0.05,
                     test_share: float = 0.05) -> Tuple[Dict[str, str], str]:
    """``({utterance id: split}, how)``: the held-out dev and test parts, the rest train.

    By speaker when every utterance names one and there are at least 3
    speakers, else by utterance; deterministic for a seed."""
    n = len(utts)
    if n < 3:
        raise SystemExit(f"prepare_custom.py: {n} usable utterance(s): train, dev and test need at least 3")
    speakers = Counter(u["speaker"] for u in utts)
    by_speaker = None not in speakers and len(speakers) >= MIN_SPEAKERS
    if not by_speaker:
        order = sorted((u["id"] for u in utts), key=lambda uid: _rank(seed, uid))
        k_test, k_dev = _share_count(test_share, n), _share_count(dev_share, n)
        if k_test + k_dev >= n:
            k_test, k_dev = 1, 1
        assign = {uid: "test" for uid in order[:k_test]}
        assign.update({uid: "dev" for uid in order[k_test:k_test + k_dev]})
        assign.update({uid: "train" for uid in order[k_test + k_dev:]})
        why = "no speakers given" if None in speakers else f"{len(speakers)} speaker(s), fewer than {MIN_SPEAKERS}"
        return assign, f"by utterance ({why})"
    left = sorted(speakers, key=lambda s: _rank(seed, s))
    chosen: Dict[str, List[str]] = {}
    for part, share in (("test", test_share), ("dev", dev_share)):
        target = _share_count(share, n)
        reserve = 2 if part == "test" else 1  # speakers still needed by dev and train
        picked, total = [], 0
        for s in list(left):
            if total >= target or len(left) - len(picked) <= reserve:
                break
            if total + speakers[s] <= 1.5 * target:
                picked.append(s)
                total += speakers[s]
        if not picked:  # every speaker is above the share: the smallest, the first ranked among equals
            picked = [min(left, key=lambda s: speakers[s])]
        chosen[part] = picked
        left = [s for s in left if s not in picked]
    split_of = {s: part for part, names in chosen.items() for s in names}
    assign = {u["id"]: split_of.get(u["speaker"], "train") for u in utts}
    return assign, (f"by speaker ({len(speakers)} speakers: {len(left)} train, {len(chosen['dev'])} dev, "
                    f"{len(chosen['test'])} test)")


# ---------------------------------------------------------------- report
def summary(utts: Sequence[Dict], assign: Dict[str, str]) -> str:
    lines = ["| split | utterances | with P | speakers | minutes |", "|---|---:|---:|---:|---:|"]
    for part in (*SPLITS, "all"):
        items = [u for u in utts if part == "all" or assign[u["id"]] == part]
        with_p = sum(1 for u in items if u["refs"]["custom"])
        spk = len({u["speaker"] for u in items if u["speaker"] is not None})
        lines.append(f"| {part} | {len(items)} | {with_p} | {spk} | {sum(u['duration'] for u in items) / 60:.1f} |")
    return "\n".join(lines)


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--custom-dir", required=True, help="The folder with the transcript file(s), or one transcript file")
    p.add_argument("--manifest-dir", default=None, help="Where the manifests go (needed unless --fingerprint true)")
    p.add_argument("--audio-dir", default=None,
                   help="Relative audio paths start from this folder [the transcript file's folder]")
    p.add_argument("--seed", type=int, default=42, help="The split's draw")
    p.add_argument("--prefix", default=PREFIX,
                   help="The manifests' name prefix (prepare.sh's --dataset: custom, or games) [custom]")
    p.add_argument("--dev-share", type=float, default=0.05, help="Share of the utterances in dev (at least one)")
    p.add_argument("--test-share", type=float, default=0.05, help="Share of the utterances in test (at least one)")
    p.add_argument("--fingerprint", choices=["true", "false"], default="false",
                   help="Only print a hash of the layout's transcript files, then exit")
    return p


def main() -> None:
    setup_logging()
    args = get_parser().parse_args()
    custom = Path(args.custom_dir).expanduser().resolve()
    if args.fingerprint == "true":
        print(fingerprint(*detect_layout(custom)))
        return
    if not args.manifest_dir:
        raise SystemExit("prepare_custom.py: give --manifest-dir")
    for name, share in (("--dev-share", args.dev_share), ("--test-share", args.test_share)):
        if not 0 < share < 0.5:
            raise SystemExit(f"prepare_custom.py: {name} is a share of the utterances, above 0 and below 0.5, "
                             f"not {share}")
    from lhotse import RecordingSet, SupervisionSegment, SupervisionSet

    audio_dir = Path(args.audio_dir).expanduser().resolve() if args.audio_dir else None
    got = collect(custom, audio_dir)
    utts, drops, layout = got["utts"], got["drops"], got["layout"]
    if not utts:
        raise SystemExit(f"prepare_custom.py: no usable utterance in {custom} ({layout} layout; skipped: "
                         + "; ".join(f"{k}: {v}" for k, v in sorted(drops.items())) + ")")
    assign, how = split_utterances(utts, args.seed, args.dev_share, args.test_share)
    out = Path(args.manifest_dir)
    out.mkdir(parents=True, exist_ok=True)
    for part in SPLITS:
        items = [u for u in utts if assign[u["id"]] == part]
        sups = [SupervisionSegment(
            id=u["id"], recording_id=u["id"], start=0.0, duration=u["duration"], channel=u["recording"].channel_ids[0],
            text=u["refs"]["text"], language="English", speaker=u["speaker"],
            custom=dict(u["refs"]["custom"], layout=layout, source=u["source"])) for u in items]
        RecordingSet.from_recordings(u["recording"] for u in items).to_file(out / f"{args.prefix}_recordings_{part}.jsonl.gz")
        SupervisionSet.from_segments(sups).to_file(out / f"{args.prefix}_supervisions_{part}.jsonl.gz")
    split_counts = {part: sum(1 for v in assign.values() if v == part) for part in SPLITS}
    report = dict(custom_dir=str(custom), layout=layout, files=got["counts"], split=how, seed=args.seed,
                  utterances=split_counts, with_p=sum(1 for u in utts if u["refs"]["custom"]),
                  skipped=dict(sorted(drops.items())))
    (out / f"{args.prefix}_prep.json").write_text(json.dumps(report, indent=1) + "\n")

    print(f"Custom data: {custom}, layout {layout}")
    print()
    print("| transcript file | rows | kept | skipped |\n|---|---:|---:|---:|")
    for name, c in got["counts"].items():
        print(f"| {name} | {c['rows']} | {c['kept']} | {c['skipped']} |")
    print()
    print(summary(utts, assign))
    print()
    print(f"Split {how}, seed {args.seed}.")
    if drops:
        print("Skipped: " + "; ".join(f"{k}: {v}" for k, v in sorted(drops.items())) + ".")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
