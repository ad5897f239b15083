#!/usr/bin/env python3
"""Build the real-speech test set ``test_real`` from recordings of people that
install from Debian's package registry, with their transcripts.

Usage:
  ./local/prepare_real.py --dl-dir download/real --manifest-dir data/real/manifests

Sources (each read from the installed package when it is installed, else from
its ``.deb``, fetched with ``apt-get download`` and unpacked under ``--dl-dir``
by ``local/debs.py``: no root and no dpkg needed, nothing installed):

* ``asterisk``: the English prompts of the Asterisk PBX, read by one
  professional speaker (Allison Smith), 8 kHz telephone audio,
  CC-BY-SA 3.0: audio in ``asterisk-core-sounds-en-wav``, transcripts in
  ``asterisk-core-sounds-en`` (``core-sounds-en.txt.gz``).  Kinds:
  ``sentence`` (a prompt of four words or more), ``phrase`` (one to three
  words) and ``word`` (the isolated digits, letters and phonetic-alphabet
  words of ``digits/``, ``letters/``, ``phonetic/``).
* ``alsa``: the eight channel-test clips of ``alsa-utils``
  (``/usr/share/sounds/alsa/Front_Center.wav`` ...: "front center"), one
  male speaker, 48 kHz, GPL-2+ like the package; kind ``phrase``.
* ``drascula``: the English voice acting of the adventure game Drascula
  (Debian ``drascula``, the Drascula license: free redistribution), ten
  characters' voices (speaker = the character), 11 kHz 8-bit; each voice
  file ``D12.ALS`` is matched to its subtitle line in ScummVM's
  ``drascula.dat`` (line 12 of Drascula's table, as ScummVM's talk code
  does); the subtitles are in capitals, so N only; kinds ``sentence`` and
  ``phrase``.

References: a transcript with capitals and marks (most Asterisk prompts:
"Please enter your password, followed by the pound key.") gives P and N (N
derived by the one normalization, zipformer_pc.text; the marks the synthetic
corpus keeps, ``. , ?``, with ``!`` written ``.``); a lowercase transcript
without marks (the digits, letters, ALSA's file names) gives N only.  A digit
is read as its word ("press 1" is spoken "press one"), ``*`` as "star" and
``#`` as "pound", as the prompts say them; a transcript with any other digits
or symbols, a description of a tone in brackets (``[beep]``, ``<beep>``) a
silence (``(10 seconds of silence)``) or a transcript without a recording is
dropped, and counted by reason; the symbol a ``letters/`` prompt names in
brackets (``at [@]``) is not said and not kept.

The voice files of ``drascula`` are converted to 16-bit wav under
``--dl-dir``.  Writes ``real_recordings_test_real.jsonl.gz`` and
``real_supervisions_test_real.jsonl.gz`` (speaker, ``custom["source"]``,
``custom["kind"]``, ``custom["license"]``) and prints the counts per source
and kind: utterances, speakers, minutes.
"""

import argparse
import gzip
import logging
import re
import sys
import tempfile
from collections import Counter, defaultdict
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Tuple

# debs.py is this script's sibling: its folder is on sys.path when run as `python local/prepare_real.py`
import debs

from zipformer_pc.data.references import SYNTH_PUNCT, is_punctuated_source, reference_fields
from zipformer_pc.logs import setup_logging

#: a split of its own, never trained on: the speakers of these sources must
#: never appear in a training corpus
SPLIT = "test_real"
PREFIX = "real"

ASTERISK_WAV_PKG = "asterisk-core-sounds-en-wav"
ASTERISK_TXT_PKG = "asterisk-core-sounds-en"
ASTERISK_WAV_DIR = "usr/share/asterisk/sounds/en_US_f_Allison"
ASTERISK_TXT = "usr/share/doc/asterisk-core-sounds-en/core-sounds-en.txt.gz"
ALSA_PKG = "alsa-utils"
ALSA_DIR = "usr/share/sounds/alsa"
DRASCULA_PKG = "drascula"
DRASCULA_DIR = "usr/share/scummvm/drascula/en"
DRASCULA_RATE = 11025  # its .ALS voice files: raw unsigned 8-bit mono
# the text tables of drascula.dat in file order, and the voice-file prefix of the ones that are spoken
# (ScummVM's engines/drascula/talk.cpp: "D12.ALS" says line 12 of the second table)
DRASCULA_TABLES = ("text", "textd", "textb", "textbj", "texte", "texti", "textl", "textp", "textt", "textvb",
                   "textsys", "texthis", "textverbs", "textmisc", "textd1")
DRASCULA_PREFIXES = {"": "text", "D": "textd", "B": "textb", "BJ": "textbj", "E": "texte", "I": "texti",
                     "L": "textl", "P": "textp", "T": "textt", "VB": "textvb"}
# the first English line: where the text tables start in drascula.dat (14 bytes before it)
DRASCULA_FIRST_LINE = b"THAT'S THE SECOND BIGGEST DOOR"
SOURCES = ("asterisk", "alsa", "drascula")

DIGIT_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
SYMBOL_WORDS = {"*": "star", "#": "pound"}
WORD_DIRS = ("digits", "letters", "phonetic")
# characters a kept transcript may hold besides letters, spaces and the marks
_ALLOWED = re.compile(r"[A-Za-z .,?!;:'\-]*")


def package_root(pkg: str, probe: str, dl_dir: Path) -> Path:
    """The file-system root holding ``probe`` (a path without its leading /) of
    Debian package ``pkg``: its files unpacked under ``dl_dir/pkg`` when there,
    else / when the package is installed, else its .deb fetched with apt-get
    download and unpacked under ``dl_dir/pkg``."""
    root = dl_dir / pkg
    if (root / probe).exists():
        return root
    if (Path("/") / probe).exists():
        return Path("/")
    dl_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dl_dir) as tmp:  # the .deb goes, its unpacked files stay
        try:
            debs.unpack(debs.fetch(pkg, Path(tmp)), root)
        except (debs.DebError, OSError) as e:
            raise SystemExit(f"prepare_real.py: {pkg} is not installed and its files are not under {root}: {e}; "
                             f"install {pkg} (Debian) or copy its files under {root}") from None
    if not (root / probe).exists():
        raise SystemExit(f"prepare_real.py: {pkg}'s package holds no {probe}")
    return root


def spoken_form(text: str) -> Optional[str]:
    """``text`` with single digits and ``* #`` as the prompts say them, or None
    when it holds something else no reader's words can be recovered from."""
    out = re.sub(r"(?<![A-Za-z0-9])([0-9])(?![A-Za-z0-9])", lambda m: DIGIT_WORDS[int(m.group(1))], text)
    for sym, word in SYMBOL_WORDS.items():
        out = out.replace(sym, word)
    out = out.replace('"', " ").replace("(", " ").replace(")", " ")
    return out if _ALLOWED.fullmatch(out) else None


def transcript_refs(text: str, source: str, drops: Counter) -> Optional[Dict]:
    """The references of a transcript as its speaker said it (digits and keys spelled,
    P only where the transcript is cased and punctuated), or None, the drop counted."""
    spoken = spoken_form(text)
    if spoken is None:
        drops[f"{source}: numbers or symbols that cannot be spelled"] += 1
        return None
    punct = is_punctuated_source(text)
    refs = reference_fields(spoken if punct else None, None if punct else spoken, config=SYNTH_PUNCT)
    if not refs["text"].split():
        drops[f"{source}: no words"] += 1
        return None
    return refs


def asterisk_entries(txt: Path) -> Iterator[Tuple[str, str]]:
    """(prompt name, transcript) of ``core-sounds-en.txt.gz``."""
    with gzip.open(txt, "rt", encoding="utf-8", errors="replace") as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith(";") or ":" not in line:
                continue
            name, text = line.split(":", 1)
            yield name.strip(), text.strip()


def asterisk_kind(name: str, n_words: int) -> str:
    if name.split("/", 1)[0] in WORD_DIRS:
        return "word"
    return "sentence" if n_words >= 4 else "phrase"


def collect_asterisk(dl_dir: Path, drops: Counter) -> List[Dict]:
    txt_root = package_root(ASTERISK_TXT_PKG, ASTERISK_TXT, dl_dir)
    wav_root = package_root(ASTERISK_WAV_PKG, ASTERISK_WAV_DIR, dl_dir)
    utts = []
    for name, text in asterisk_entries(txt_root / ASTERISK_TXT):
        wav = wav_root / ASTERISK_WAV_DIR / f"{name}.wav"
        if re.fullmatch(r"\s*[\[<(].*[\])>]\s*", text):
            drops["asterisk: a tone or silence, not speech ([...], <...>, (...))"] += 1
            continue
        # "at [@]": the symbol a letters/ prompt names, not said
        text = re.sub(r"\s*\[[^\]]*\]", "", text)
        if not wav.is_file():
            drops["asterisk: transcript without a recording"] += 1
            continue
        refs = transcript_refs(text, "asterisk", drops)
        if refs is None:
            continue
        n_words = len(refs["text"].split())
        utts.append(dict(id=f"asterisk-{name.replace('/', '-')}", path=wav, refs=refs, speaker="asterisk-allison",
                         source="asterisk", kind=asterisk_kind(name, n_words), license="CC-BY-SA-3.0"))
    return utts


def collect_alsa(dl_dir: Path, drops: Counter) -> List[Dict]:
    root = package_root(ALSA_PKG, f"{ALSA_DIR}/Front_Center.wav", dl_dir)
    utts = []
    for wav in sorted((root / ALSA_DIR).glob("*.wav")):
        if wav.stem.lower() == "noise":
            drops["alsa: Noise.wav (no speech)"] += 1
            continue
        words = wav.stem.replace("_", " ")
        refs = reference_fields(None, words, config=SYNTH_PUNCT)
        utts.append(dict(id=f"alsa-{wav.stem}", path=wav, refs=refs, speaker="alsa-utils", source="alsa",
                         kind="phrase", license="GPL-2+"))
    return utts


def drascula_texts(dat: Path) -> Dict[str, List[str]]:
    """The English lines of each text table of ScummVM's ``drascula.dat``: after a u16
    count of languages, per table a u16 count of lines and per language a u16 byte
    length and the block, each line a big-endian u32 length (itself included) and a
    zero-padded Latin-1 string; English is the first language."""
    import struct

    data = dat.read_bytes()
    start = data.find(DRASCULA_FIRST_LINE) - 14
    if not data.startswith(b"DRASCULA") or start < 8:
        raise SystemExit(f"prepare_real.py: {dat} is not the drascula.dat this reader knows (Debian drascula 1.0)")
    (langs,), pos = struct.unpack_from(">H", data, start), start + 2
    tables: Dict[str, List[str]] = {}
    try:
        for name in DRASCULA_TABLES:
            (count,), pos = struct.unpack_from(">H", data, pos), pos + 2
            for lang in range(langs):
                (size,), pos = struct.unpack_from(">H", data, pos), pos + 2
                block, pos = data[pos:pos + size], pos + size
                if lang:
                    continue
                lines, q = [], 0
                while len(lines) < count:
                    (n,) = struct.unpack_from(">I", block, q)
                    if n < 4:
                        raise ValueError(f"a line of {n} bytes")
                    lines.append(block[q + 4:q + n].split(b"\0", 1)[0].decode("latin-1"))
                    q += n
                tables[name] = lines
    except (struct.error, ValueError) as e:
        raise SystemExit(f"prepare_real.py: cannot read the text tables of {dat} ({e})") from None
    if pos != len(data):
        raise SystemExit(f"prepare_real.py: {dat}'s text tables end at byte {pos} of {len(data)}: not the known layout")
    return tables


def collect_drascula(dl_dir: Path, drops: Counter) -> List[Dict]:
    """The English voice files of the adventure game Drascula with their subtitle lines:
    its characters' voice actors, 11 kHz. The subtitles are written in capitals: N only."""
    import numpy as np
    import soundfile as sf

    root = package_root(DRASCULA_PKG, f"{DRASCULA_DIR}/drascula.dat", dl_dir)
    texts = drascula_texts(root / DRASCULA_DIR / "drascula.dat")
    wav_dir = dl_dir / "drascula-wav"
    wav_dir.mkdir(parents=True, exist_ok=True)
    utts = []
    for als in sorted((root / DRASCULA_DIR).glob("*.ALS")):
        m = re.fullmatch(r"([A-Z]*)(\d+)", als.stem)
        if not m or m.group(1) not in DRASCULA_PREFIXES:
            drops["drascula: a voice file of no known speaker table"] += 1
            continue
        lines = texts[DRASCULA_PREFIXES[m.group(1)]]
        i = int(m.group(2))
        text = lines[i].strip() if i < len(lines) else ""
        if not text:
            drops["drascula: a voice file without a subtitle"] += 1
            continue
        refs = transcript_refs(text, "drascula", drops)  # subtitles in capitals: N only
        if refs is None:
            continue
        n_words = len(refs["text"].split())
        wav = wav_dir / f"{als.stem}.wav"
        if not wav.is_file():
            raw = np.frombuffer(als.read_bytes(), dtype=np.uint8).astype(np.float32)
            tmp = wav.with_suffix(".tmp.wav")
            sf.write(tmp, (raw - 128.0) / 128.0, DRASCULA_RATE, subtype="PCM_16", format="WAV")
            tmp.replace(wav)
        utts.append(dict(id=f"drascula-{als.stem}", path=wav, refs=refs,
                         speaker=f"drascula-{m.group(1).lower() or 'john'}", source="drascula",
                         kind="sentence" if n_words >= 4 else "phrase", license="Drascula-License"))
    return utts


def summary(rows: List[Tuple[str, str, str, float]]) -> str:
    """A Markdown table of (source, kind, speaker, seconds) rows: utterances,
    speakers and minutes per source and kind, and in all."""
    groups: Dict[Tuple[str, str], List] = defaultdict(list)
    for source, kind, speaker, sec in rows:
        groups[(source, kind)].append((speaker, sec))
        groups[("all", "all")].append((speaker, sec))
    lines = ["| source | kind | utterances | speakers | minutes |", "|---|---|---:|---:|---:|"]
    for (source, kind), items in sorted(groups.items(), key=lambda kv: (kv[0][0] == "all", kv[0])):
        lines.append(f"| {source} | {kind} | {len(items)} | {len({s for s, _ in items})} | "
                     f"{sum(t for _, t in items) / 60:.1f} |")
    return "\n".join(lines)


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dl-dir", required=True, help="Where the packages' .deb files are unpacked when not installed")
    p.add_argument("--manifest-dir", required=True)
    p.add_argument("--sources", default=",".join(SOURCES), help=f"Comma list of {', '.join(SOURCES)}")
    return p


def main() -> None:
    setup_logging()
    args = get_parser().parse_args()
    from lhotse import Recording, RecordingSet, SupervisionSegment, SupervisionSet

    sources = [s for s in args.sources.split(",") if s]
    unknown = sorted(set(sources) - set(SOURCES))
    if unknown or not sources:
        raise SystemExit(f"prepare_real.py: --sources takes {', '.join(SOURCES)}, not {args.sources!r}")
    dl_dir = Path(args.dl_dir).resolve()
    drops: Counter = Counter()
    utts: List[Dict] = []
    collect = {"asterisk": collect_asterisk, "alsa": collect_alsa, "drascula": collect_drascula}
    for s in sources:
        utts.extend(collect[s](dl_dir, drops))

    recordings, supervisions, rows = [], [], []
    for u in utts:
        try:
            rec = Recording.from_file(u["path"], recording_id=u["id"])
        except Exception as e:
            drops[f"{u['source']}: unreadable audio"] += 1
            logging.warning(f"Skipping {u['id']}: unreadable audio {u['path']} ({e})")
            continue
        custom = dict(u["refs"]["custom"], source=u["source"], kind=u["kind"], license=u["license"])
        recordings.append(rec)
        supervisions.append(SupervisionSegment(
            id=u["id"], recording_id=u["id"], start=0.0, duration=rec.duration, channel=0,
            text=u["refs"]["text"], language="English", speaker=u["speaker"], custom=custom))
        rows.append((u["source"], u["kind"], u["speaker"], rec.duration))
    if not recordings:
        raise SystemExit("prepare_real.py: no utterance could be read")
    out = Path(args.manifest_dir)
    out.mkdir(parents=True, exist_ok=True)
    RecordingSet.from_recordings(recordings).to_file(out / f"{PREFIX}_recordings_{SPLIT}.jsonl.gz")
    SupervisionSet.from_segments(supervisions).to_file(out / f"{PREFIX}_supervisions_{SPLIT}.jsonl.gz")
    with_p = sum(1 for s in supervisions if "text_p" in (s.custom or {}))
    print(f"{SPLIT}: {len(supervisions)} utterances ({with_p} with a punctuated reference)")
    print(summary(rows))
    if drops:
        print("Dropped: " + "; ".join(f"{k}: {v}" for k, v in sorted(drops.items())))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
