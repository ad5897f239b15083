#!/usr/bin/env python3
"""Build the text side of the embedded synthetic corpus.

Usage:
  ./local/prepare_synth_text.py --out-dir data/synth/text --train-hours 2 \
      --dev-utts 150 --test-utts 300 --ood-utts 300 --dev-ood-utts 150 --seed 42
  # one split only, e.g. dev_ood for a corpus made before it existed
  ./local/prepare_synth_text.py --out-dir data/synth/text ... --splits dev_ood

In-domain text is Jane Austen's six novels (Debian package
``r-cran-janeaustenr``); out-of-domain text is Herman Melville's *Moby Dick*
(Debian package ``r-cran-tokenizers``).  Both are read from the packages' R
data files with the PyPI package ``rdata``; nothing is downloaded.
``--gcide-hours H`` adds ~H hours of training text from the definitions and
quotations of Webster's 1913 dictionary (Debian ``dict-gcide``, ~100 h
available): 40 h of Austen leave 16.2% of test_ood's running words unseen,
with 10 / 20 / 40 h of gcide added 8.8 / 6.9 / 4.8% (all ~100 h: ~3%).  The
Austen utterances come first and keep their ids.

Steps: books -> paragraphs (headings, chapter titles, all-caps and other
non-prose lines dropped) -> sentences (common abbreviations spelt out, so the
text says what the voices say: ``Mr.`` -> ``Mister``) -> sentence filters
(3..45 words, no digits, no all-caps words) -> de-duplication on the
normalized form -> utterances of 1 to 3 consecutive sentences of one
paragraph (4..40 words, roughly 2 to 15 s of speech) -> splits.

Questions are rare in prose (~4 per 1000 words), so every utterance holding a
question is kept, up to ``--max-question-fraction`` of each split.  dev, test
and test_ood do not depend on ``--train-hours``: corpora of any size share
them, so their models can be compared.  Training text keeps what questions
are left after dev and test (~8% of its sentence ends, against ~30% in dev
and test); ``--train-question-readings K`` lists each training utterance that
holds a question K times in all: the copies come after the originals with
ids of their own, so other voices read them (local/synthesize.py draws a
voice per id) and the first readings keep their ids and audio.

``dev_ood`` is test_ood's dev set, as LibriSpeech's dev-other is test-other's:
other Moby Dick text (never a test_ood sentence), for the held-out voices to
read, so that choices made for out-of-domain speech (a mix weight, a search
setting) need not look at test_ood.  It is drawn after test_ood, from a
generator of its own: test_ood and every other split are the same with or
without it.

Writes ``{train,dev,test,test_ood,dev_ood}.jsonl``: one utterance a line with ``id``,
``source`` (book), ``text_raw`` (folded ASCII prose, the reference source) and
``tts_text`` (what the voices read: the same words, quotes and italics
removed), plus ``stats.json``.
"""

import argparse
import gzip
import json
import logging
import random
import re
import sys
import zlib
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

from zipformer_pc.logs import setup_logging
from zipformer_pc.text import PunctConfig, fold_to_ascii, normalized, punctuated

AUSTEN_RDATA = "/usr/lib/R/site-library/janeaustenr/data/Rdata"
MOBYDICK_RDATA = "/usr/lib/R/site-library/tokenizers/data/Rdata"
# Webster's 1913: installed by Debian's dict-gcide, or unpacked into the venv by tools/setup_env.sh
GCIDE_DICTS = ("/usr/share/dictd/gcide.dict.dz", str(Path(sys.prefix) / "share/gcide/gcide.dict.dz"))
AUSTEN_BOOKS = ("sensesensibility", "prideprejudice", "mansfieldpark", "emma", "northangerabbey", "persuasion")

SPLITS = ("train", "dev", "test", "test_ood", "dev_ood")
WORDS_PER_SECOND = 3.0  # measured speaking rate of the voices, pauses included

# Spelt out before sentence splitting, so that P, N and the audio agree.
ABBREVIATIONS = {
    "Mr": "Mister",
    "Mrs": "Missus",
    "Messrs": "Messieurs",
    "Dr": "Doctor",
    "St": "Saint",
    "Col": "Colonel",
    "Capt": "Captain",
    "Gen": "General",
    "Lieut": "Lieutenant",
    "Rev": "Reverend",
    "Esq": "Esquire",
}
# "Mr. Elliot", and the British "Mr Elliot" (no period: Persuasion writes it so), which the
# voices read as "Mister" as well; without its period only a title before a capitalised name or
# "and" ("Mr and Mrs Musgrove").
_TITLES = tuple(a for a in ABBREVIATIONS if a != "Esq")
_ABBR_RE = re.compile(
    r"\b(?:(" + "|".join(ABBREVIATIONS) + r")\.(?=\s|$)|(" + "|".join(_TITLES) + r")(?=\s+(?:[A-Z]|and\s)))"
)
_ETC_RE = re.compile(r"&c\b")

# What the voices read: the same words as P and N, with the marks that give
# prosody (all of them kept; dashes read as a pause, ellipses as a stop).
TTS_PUNCT = PunctConfig(keep=(".", ",", "?", "!", ";", ":"), mapping={"--": ",", "...": "."})

_HEADING_RE = re.compile(
    r"^(chapter|volume|book|vol\.|etymology|extracts|epilogue|the end|finis)\b", re.IGNORECASE
)
# sentence end: . ? ! (possibly repeated), closing quotes/brackets, then space
_SENT_END_RE = re.compile(r"[.?!]+[\"')\]]*\s+")
_ALLCAPS_WORD_RE = re.compile(r"\b[A-Z]{2,}\b")


def read_rdata_lazyload(base: str) -> Dict[str, object]:
    """Read every object of an R package's lazy-load data base (``Rdata.rdx``/``.rdb``)."""
    import rdata

    rdx, rdb = Path(base + ".rdx"), Path(base + ".rdb")
    for p in (rdx, rdb):
        if not p.is_file():
            raise FileNotFoundError(f"{p} not found")
    index = rdata.conversion.convert(rdata.parser.parse_data(gzip.decompress(rdx.read_bytes()), extension=".rds"))
    blob = rdb.read_bytes()
    out = {}
    for name, (offset, length) in index["variables"].items():
        chunk = blob[int(offset) : int(offset) + int(length)]
        # 4-byte big-endian uncompressed size, then zlib data
        obj = rdata.parser.parse_data(zlib.decompress(chunk[4:]), extension=".rds")
        out[str(name)] = rdata.conversion.convert(obj)
    return out


def load_austen() -> Dict[str, List[str]]:
    try:
        data = read_rdata_lazyload(AUSTEN_RDATA)
    except FileNotFoundError as e:
        raise SystemExit(f"{e}: install the Debian package r-cran-janeaustenr (apt-get install r-cran-janeaustenr)")
    return {b: [str(x) for x in data[b]] for b in AUSTEN_BOOKS}


def load_mobydick() -> Dict[str, List[str]]:
    try:
        data = read_rdata_lazyload(MOBYDICK_RDATA)
    except FileNotFoundError as e:
        raise SystemExit(f"{e}: install the Debian package r-cran-tokenizers (apt-get install r-cran-tokenizers)")
    text = str(data["mobydick"][0]).replace("\r\n", "\n")
    start = text.find("*** START OF")
    end = text.find("*** END OF")
    if start >= 0:
        text = text[text.index("\n", start) + 1 :]
    if end >= 0:
        text = text[: text.find("*** END OF")]
    # Start at the first chapter: the front matter is lists and quotations.
    first = text.find("CHAPTER 1.")
    first = text.find("CHAPTER 1.", first + 1) if first >= 0 else -1  # skip the table of contents
    if first >= 0:
        text = text[first:]
    return {"mobydick": text.split("\n")}


# gcide: a line that closes a definition or quotation ("[1913 Webster]", "[WordNet 1.5]", "[PJC]")
_GCIDE_TAG_RE = re.compile(r"^\s*\[[^\]]*\]\s*$")
_GCIDE_LEAD_RE = re.compile(r"^(?:\d+\.\s*|\([A-Z][A-Za-z. &]*\)\s*|Note:\s*)+")
_GCIDE_TEXT_RE = re.compile(r"^[A-Za-z ,.;:?!'\"()-]+$")
# dictionary shorthand the voices would not read as N writes it, and spaced ellipses
_GCIDE_SHORTHAND_RE = re.compile(r"\b(?:esp|etc|Fig|cf|fr|viz|Lit|Obs|i\. ?e|e\. ?g|q\. ?v)\.|\b(?:Syn|Usage|Fig)\s*:|\. ?\.")


def gcide_block(lines: Sequence[str]) -> str:
    """One definition or quotation of gcide as plain prose, or "" when it is not prose:
    sense numbers, field labels ("(Bot.)"), bracketed notes ("[R.]"), cross-reference
    braces and the citation after "--" removed; blocks with other markup (Greek
    letters print as "?") dropped."""
    text = " ".join(line.strip() for line in lines)
    text = text.split("--")[0]
    text = re.sub(r"\[[^\]]*\]", " ", text)
    text = re.sub(r"\{([^{}*\"`]*)\}", r"\1", text)
    text = _GCIDE_LEAD_RE.sub("", " ".join(text.split()))
    text = re.sub(r"\s+([,.;:?!])", r"\1", text)  # what removed markup leaves: "gemm ."
    if (not _GCIDE_TEXT_RE.match(text) or _GCIDE_SHORTHAND_RE.search(text)
            or re.search(r"(?<![A-Za-z])\?|\?(?=[A-Za-z])", text)):
        return ""
    return text if text[:1].isupper() else ""


def load_gcide(path: Optional[str] = None) -> Dict[str, List[str]]:
    """Definitions and quotations of the Collaborative International Dictionary of
    English (Webster's 1913, Debian ``dict-gcide``) as one "book" of paragraphs
    (blank lines between them). An entry's head block (headword, pronunciation,
    etymology) is skipped; the blocks after it, each closed by a source tag
    such as ``[1913 Webster]``, are kept when gcide_block finds prose in them."""
    paths = [path] if path else list(GCIDE_DICTS)
    found = [p for p in paths if Path(p).is_file()]
    if not found:
        raise SystemExit(f"{' or '.join(paths)} not found: run tools/setup_env.sh, or install the Debian package "
                         "dict-gcide (apt-get install dict-gcide)")
    f = gzip.open(found[0], "rt", encoding="utf-8", errors="replace")
    out: List[str] = []
    block: List[str] = []
    head = True  # in an entry's first block
    with f:
        for line in f:
            line = line.rstrip("\n")
            if line and not line[0].isspace():  # a new entry
                block, head = [], True
                continue
            if _GCIDE_TAG_RE.match(line):
                text = "" if head else gcide_block(block)
                if text:
                    out += [text, ""]
                block, head = [], False
                continue
            if line.strip():
                block.append(line)
    return {"gcide": out}


def paragraphs(lines: Sequence[str]) -> Iterator[str]:
    """Join non-empty lines into paragraphs and drop the ones that are not prose."""
    buf: List[str] = []
    for line in list(lines) + [""]:
        if line.strip():
            buf.append(line.strip())
            continue
        if buf:
            para = fold_to_ascii(" ".join(buf))
            buf = []
            if is_prose(para):
                yield para


def is_prose(para: str) -> bool:
    """False for headings, chapter titles, all-caps lines and title-page lines."""
    if not re.search(r"[a-z]", para):
        return False  # all caps or no letters: headings, "CHAPTER IV", "THE END"
    if _HEADING_RE.match(para.strip()):
        return False
    words = para.split()
    if len(words) < 4 and not re.search(r"[.?!]\W*$", para):
        return False  # "By Jane Austen", "(1814)", "Persuasion"
    return True


def expand_abbreviations(text: str) -> str:
    text = _ETC_RE.sub("et cetera", text)
    return _ABBR_RE.sub(lambda m: ABBREVIATIONS[m.group(1) or m.group(2)], text)


def split_sentences(para: str) -> List[str]:
    """Split a paragraph at . ? ! followed by space and a capital or quote."""
    out: List[str] = []
    start = 0
    for m in _SENT_END_RE.finditer(para):
        nxt = para[m.end() : m.end() + 2]
        if not nxt or not re.match(r"[\"'(_]?[A-Z]", nxt):
            continue
        out.append(para[start : m.end()].strip())
        start = m.end()
    tail = para[start:].strip()
    if tail:
        out.append(tail)
    return out


def keep_sentence(sent: str, min_words: int = 3, max_words: int = 45) -> bool:
    n = len(normalized(sent).split())
    if not (min_words <= n <= max_words):
        return False
    if re.search(r"[0-9]", sent):
        return False  # digits: the voices would read what N does not write
    if _ALLCAPS_WORD_RE.search(sent.replace("_", " ")):
        return False  # emphasis or acronyms in capitals: read letter by letter
    if not re.search(r"[.?!][\"')\]_]*$", sent):
        return False  # does not end a sentence (cut by a paragraph break)
    return True


def sentences_of(books: Dict[str, List[str]], seen: set) -> List[Tuple[str, int, List[str]]]:
    """``(book, paragraph index, sentences)`` with filtered, de-duplicated sentences."""
    out = []
    for book, lines in books.items():
        for pi, para in enumerate(paragraphs(lines)):
            kept = []
            for s in split_sentences(expand_abbreviations(para)):
                key = normalized(s)
                if not keep_sentence(s) or key in seen:
                    if kept:  # a gap breaks consecutiveness: start a new run
                        out.append((book, pi, kept))
                        kept = []
                    continue
                seen.add(key)
                kept.append(s)
            if kept:
                out.append((book, pi, kept))
    return out


def group_utterances(
    runs: List[Tuple[str, int, List[str]]], rng: random.Random, min_words: int = 4, max_words: int = 40
) -> List[Dict[str, object]]:
    """Group consecutive sentences into utterances of 1..3 sentences."""
    utts = []
    for book, pi, sents in runs:
        i = 0
        while i < len(sents):
            target = rng.choices((1, 2, 3), weights=(0.5, 0.3, 0.2))[0]
            group = [sents[i]]
            i += 1
            n = len(normalized(group[0]).split())
            while i < len(sents) and len(group) < 3:
                m = len(normalized(sents[i]).split())
                if n + m > max_words or (len(group) >= target and n >= min_words):
                    break
                group.append(sents[i])
                n += m
                i += 1
            if n < min_words or n > max_words:
                continue
            raw = " ".join(group)
            utts.append(
                {
                    "source": book,
                    "paragraph": pi,
                    "text_raw": raw,
                    "tts_text": punctuated(raw, TTS_PUNCT),
                    "num_words": n,
                    "num_sentences": len(group),
                    "has_question": "?" in punctuated(raw),
                }
            )
    return utts


def select(
    utts: List[Dict[str, object]], rng: random.Random, budget_words: float, max_q_frac: float
) -> Tuple[List[Dict[str, object]], List[Dict[str, object]]]:
    """Pick utterances until ``budget_words`` is reached (the last one may pass
    it): questions first, up to ``max_q_frac`` of the budget, then the rest."""
    qs = [u for u in utts if u["has_question"]]
    rest = [u for u in utts if not u["has_question"]]
    rng.shuffle(qs)
    rng.shuffle(rest)
    chosen: List[Dict[str, object]] = []
    words = 0
    q_words = 0
    for u in qs:
        if q_words + u["num_words"] > max_q_frac * budget_words:
            break
        chosen.append(u)
        q_words += u["num_words"]
    words = q_words
    used = {id(u) for u in chosen}
    for u in rest:
        if words >= budget_words:
            break
        chosen.append(u)
        used.add(id(u))
        words += u["num_words"]
    left = [u for u in utts if id(u) not in used]
    rng.shuffle(chosen)
    return chosen, left


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out-dir", required=True)
    p.add_argument("--train-hours", type=float, default=2.0, help="Estimated hours of training speech")
    p.add_argument("--dev-utts", type=int, default=150)
    p.add_argument("--test-utts", type=int, default=300)
    p.add_argument("--ood-utts", type=int, default=300)
    p.add_argument("--dev-ood-utts", type=int, default=150,
                   help="Utterances of dev_ood: Moby Dick text outside test_ood, for the held-out voices")
    p.add_argument("--splits", default=",".join(SPLITS),
                   help="Comma-separated splits to write (all are drawn, so each is the same whichever are written)")
    p.add_argument("--max-question-fraction", type=float, default=0.4,
                   help="At most this fraction of a split's words come from question utterances")
    p.add_argument("--train-question-readings", type=int, default=1,
                   help="Times each training utterance holding a question is read (by other voices)")
    p.add_argument("--gcide-hours", type=float, default=0.0,
                   help="Estimated hours of training speech added from the definitions and quotations of the "
                        "Collaborative International Dictionary of English (Webster's 1913; Debian dict-gcide): "
                        "words Austen never uses. 0: none")
    p.add_argument("--seed", type=int, default=42)
    return p


def estimated_hours(utts: List[Dict[str, object]]) -> float:
    """Hours of speech the voices take to read ``utts`` (at WORDS_PER_SECOND)."""
    return sum(int(u["num_words"]) for u in utts) / WORDS_PER_SECOND / 3600


def words_for_hours(hours: float) -> float:
    """The number of words the voices read in ``hours`` (the inverse of :func:`estimated_hours`)."""
    return hours * 3600 * WORDS_PER_SECOND


def add_readings(utts: List[Dict[str, object]], readings: int, split: str = "train") -> List[Dict[str, object]]:
    """``utts`` followed by ``readings - 1`` more copies of each question
    utterance, with ``reading`` (2, 3, ...) and ``first_reading`` (the id the
    original gets in ``{split}.jsonl``)."""
    out = list(utts)
    for k in range(2, readings + 1):
        out += [{**u, "reading": k, "first_reading": f"{split}-{i:06d}"}
                for i, u in enumerate(utts) if u["has_question"]]
    return out


def main() -> None:
    setup_logging()
    args = get_parser().parse_args()
    if args.train_question_readings < 1:
        raise SystemExit(f"--train-question-readings must be >= 1, got {args.train_question_readings}")
    wanted = [s for s in args.splits.split(",") if s]
    unknown = sorted(set(wanted) - set(SPLITS))
    if unknown or not wanted:
        raise SystemExit(f"--splits: choose among {', '.join(SPLITS)}, got {args.splits!r}")
    rng = random.Random(args.seed)
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)

    seen: set = set()
    austen = group_utterances(sentences_of(load_austen(), seen), rng)
    ood_pool = group_utterances(sentences_of(load_mobydick(), seen), rng)
    logging.info(f"Austen: {len(austen)} candidate utterances; Moby Dick: {len(ood_pool)}")

    avg_words = sum(u["num_words"] for u in austen) / max(1, len(austen))
    splits: Dict[str, List[Dict[str, object]]] = {}
    pool = austen
    for name, n_utts in (("test", args.test_utts), ("dev", args.dev_utts)):
        splits[name], pool = select(pool, rng, n_utts * avg_words, args.max_question_fraction)
        splits[name] = splits[name][:n_utts]
    splits["train"], _ = select(pool, rng, words_for_hours(args.train_hours), args.max_question_fraction)
    estimated_train_hours = estimated_hours(splits["train"])
    if args.gcide_hours > 0:
        # after Austen's training text, from a generator of its own: the Austen
        # utterances keep their ids (and audio) whatever --gcide-hours is
        gcide_rng = random.Random(f"gcide-{args.seed}")
        gcide = group_utterances(sentences_of(load_gcide(), seen), gcide_rng)
        extra, _ = select(gcide, gcide_rng, words_for_hours(args.gcide_hours), args.max_question_fraction)
        logging.info(f"gcide: {len(gcide)} candidate utterances, {len(extra)} added to train "
                     f"(~{estimated_hours(extra):.1f} h)")
        splits["train"] += extra
    splits["train"] = add_readings(splits["train"], args.train_question_readings)
    # test_ood draws from its own generator: the main one has just drawn the
    # training text, whose size (--train-hours) must not change the test set
    ood_rng = random.Random(f"test_ood-{args.seed}")
    ood_avg = sum(u["num_words"] for u in ood_pool) / max(1, len(ood_pool))
    splits["test_ood"], ood_left = select(ood_pool, ood_rng, args.ood_utts * ood_avg, args.max_question_fraction)
    splits["test_ood"] = splits["test_ood"][: args.ood_utts]
    # dev_ood: from the Moby Dick utterances test_ood's selection never drew
    # (so none is in both), with a generator of its own
    dev_ood_rng = random.Random(f"dev_ood-{args.seed}")
    splits["dev_ood"], _ = select(ood_left, dev_ood_rng, args.dev_ood_utts * ood_avg, args.max_question_fraction)
    splits["dev_ood"] = splits["dev_ood"][: args.dev_ood_utts]

    stats_file = out_dir / "stats.json"
    stats = json.loads(stats_file.read_text()) if stats_file.exists() and len(wanted) < len(SPLITS) else {}
    for name in wanted:
        utts = splits[name]
        with open(out_dir / f"{name}.jsonl", "w", encoding="utf-8") as f:
            for i, u in enumerate(utts):
                u = {"id": f"{name}-{i:06d}", **u}
                f.write(json.dumps(u, ensure_ascii=True) + "\n")
        stats[name] = {
            "utterances": len(utts),
            "words": sum(u["num_words"] for u in utts),
            "estimated_hours": round(estimated_hours(utts), 3),
            "question_utterances": sum(bool(u["has_question"]) for u in utts),
        }
        logging.info(f"{name}: {stats[name]}")
    if estimated_train_hours < args.train_hours * 0.99:
        logging.warning(f"--train-hours {args.train_hours}: the Austen text left after dev and test holds "
                        f"only ~{estimated_train_hours:.1f} h; train takes all of it")
    stats_file.write_text(json.dumps(stats, indent=1) + "\n")


if __name__ == "__main__":
    main()
