"""The one text normalization of the recipe.

Every transcript that enters training, decoding, scoring or the streaming
runtime goes through this module, so the punctuated-cased form (P) and the
normalized form (N) of an utterance are defined in exactly one place.

    >>> from zipformer_pc.text import punctuated, normalized
    >>> punctuated('\u201cWell\u2014I don\u2019t know,\u201d said Mr. Bennet; \u201cis it?\u201d')
    "Well I don't know, said Mr. Bennet is it?"
    >>> normalized('\u201cWell\u2014I don\u2019t know,\u201d said Mr. Bennet; \u201cis it?\u201d')
    "well i don't know said mr bennet is it"

Rules (the contract other modules and tests rely on):

* Unicode is folded to ASCII first: curly quotes become straight ones, em/en
  dashes become ``--``, the ellipsis character becomes ``...``, accented
  letters lose their accents (``Kut\u00fazov`` -> ``Kutuzov``), ligatures are
  spelled out (``\u00e6`` -> ``ae``, ``\u00df`` -> ``ss``); any other non-ASCII
  character is a word separator.
* A *word* is a run of ASCII letters and digits, possibly joined by single
  in-word apostrophes or hyphens: ``don't``, ``o'clock``, ``well-known``.
  Apostrophes and hyphens at a word's edge are quote marks or dashes, not
  part of the word (``'tis`` -> ``tis``, ``the Smiths'`` -> ``the Smiths``).
* A *mark* is one of ``. , ? ! ; :``, an ellipsis (``...``, two or more
  periods) or a dash (``--``, two or more hyphens).  Every other character
  (quotes, brackets, ``_``, ``*`` ...) is a separator.
* P keeps the case of the words, keeps the marks of the configured set
  (default ``. , ?`` as in LibriSpeech-PC), maps or drops the others
  (:class:`PunctConfig`), attaches each mark to the word before it and
  separates words by one space.  A mark with no word before it is dropped.
  When several marks follow one word (``"Stop!"?`` or ``well,--``) the
  strongest kept one wins: ``?`` > ``!`` > ``.`` > ``...`` > ``;`` > ``:`` >
  ``,`` > ``--``.
* N is lowercase, has no marks, keeps in-word apostrophes (``don't``) and
  splits hyphenated words into their parts (``well-known`` -> ``well known``),
  which is how LibriSpeech's normalized transcripts write them
  (``TWENTY FIVE``, ``GOOD NIGHT``).
* N is computed from the same word sequence as P, so ``N(P(x)) == N(x)``
  for any x and any punctuation config, and ``P(P(x)) == P(x)``.

The marks a word carries never change its spelling, and abbreviations keep
their period (``Mr.``); expanding them (``mister``) is a data-preparation
choice, not a normalization rule.
"""

import re
import unicodedata
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Mapping, Optional, Tuple

ELLIPSIS = "..."
DASH = "--"

# All marks the tokenizer recognizes, strongest first.  The order decides
# which mark survives when several follow one word.
MARKS: Tuple[str, ...] = ("?", "!", ".", ELLIPSIS, ";", ":", ",", DASH)
_PRIORITY: Dict[str, int] = {m: i for i, m in enumerate(MARKS)}
# The characters the marks are written with: all a word's end may carry.
MARK_CHARS = frozenset("".join(MARKS))
#: sentencepiece's word-boundary marker, the first character of a word's first piece
WORD_START = "\u2581"

# Default kept set, as in the LibriSpeech-PC experiments.
DEFAULT_KEEP: Tuple[str, ...] = (".", ",", "?")

_WORD = r"[A-Za-z0-9]+(?:['-][A-Za-z0-9]+)*"
_MARK = r"\.{2,}|-{2,}|[.,?!;:]"
_TOKEN_RE = re.compile(f"({_WORD})|({_MARK})")

# Characters folded before NFKD decomposition (NFKD alone would not map
# them, or would map them to something unhelpful).
_FOLD_TABLE = str.maketrans(
    {
        "\u2018": "'",  # left single quotation mark
        "\u2019": "'",  # right single quotation mark / apostrophe
        "\u201a": "'",
        "\u201b": "'",
        "\u2032": "'",  # prime
        "\u02bc": "'",  # modifier letter apostrophe
        "\u00b4": "'",  # acute accent used as apostrophe
        "`": "'",
        "\u201c": '"',
        "\u201d": '"',
        "\u201e": '"',
        "\u201f": '"',
        "\u2033": '"',
        "\u00ab": '"',
        "\u00bb": '"',
        "\u2010": "-",  # hyphen
        "\u2011": "-",  # non-breaking hyphen
        "\u00ad": "",  # soft hyphen: invisible, joins the word
        "\u2012": DASH,  # figure dash
        "\u2013": DASH,  # en dash
        "\u2014": DASH,  # em dash
        "\u2015": DASH,  # horizontal bar
        "\u2212": "-",  # minus sign
        "\u2026": ELLIPSIS,
        "\u00e6": "ae",
        "\u00c6": "Ae",
        "\u0153": "oe",
        "\u0152": "Oe",
        "\u00df": "ss",
        "\u1e9e": "SS",  # capital sharp s
        "\u00f8": "o",
        "\u00d8": "O",
        "\u0111": "d",
        "\u0110": "D",
        "\u0142": "l",
        "\u0141": "L",
        "\u00fe": "th",
        "\u00de": "Th",
        "\u00f0": "d",
        "\u00d0": "D",
        "\u0131": "i",  # dotless i
        "\u00a1": " ",  # inverted exclamation mark
        "\u00bf": " ",  # inverted question mark
    }
)


def fold_to_ascii(text: str) -> str:
    """Fold typographic Unicode to ASCII (quotes, dashes, accents, ligatures).

    Characters with no ASCII spelling become spaces, so they separate words
    instead of silently gluing them together.
    """
    if text.isascii():
        # The one ASCII character the table folds: a backtick used as apostrophe.
        return text.replace("`", "'") if "`" in text else text
    text = unicodedata.normalize("NFKD", text.translate(_FOLD_TABLE))
    # NFKD may expose characters of the fold table again (e.g. compatibility
    # forms of dashes), so translate a second time before dropping.
    text = text.translate(_FOLD_TABLE)
    out = []
    for ch in text:
        if ch.isascii():
            out.append(ch)
        elif unicodedata.combining(ch):
            continue  # accent stripped from the preceding letter
        else:
            out.append(" ")
    return "".join(out)


@dataclass(frozen=True)
class PunctConfig:
    """Which marks P keeps, and what the others become.

    Args:
      keep: marks kept in P, a subset of :data:`MARKS`.
      mapping: mark -> kept mark (or ``""`` to drop).  Marks neither kept
        nor mapped are dropped.
    """

    keep: Tuple[str, ...] = DEFAULT_KEEP
    mapping: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for m in self.keep:
            if m not in _PRIORITY:
                raise ValueError(f"Unknown mark {m!r} in keep; known marks: {' '.join(MARKS)}")
        for src, dst in self.mapping.items():
            if src not in _PRIORITY:
                raise ValueError(f"Unknown mark {src!r} in mapping; known marks: {' '.join(MARKS)}")
            if dst and dst not in self.keep:
                raise ValueError(f"Mapping {src!r} -> {dst!r}: the target must be a kept mark {self.keep}")
        table = {m: m for m in self.keep}
        for src, dst in self.mapping.items():
            if src not in self.keep:
                table[src] = dst
        # frozen dataclass: set the derived lookup table through object.__setattr__
        object.__setattr__(self, "_table", {m: table.get(m, "") for m in MARKS})

    def resolve(self, mark: str) -> str:
        """The mark P writes for an input mark ("" if dropped)."""
        return self._table[mark]  # type: ignore[attr-defined]

    @classmethod
    def parse(cls, keep: str = ". , ?", mapping: str = "") -> "PunctConfig":
        """Build a config from command-line strings.

        ``keep`` lists marks separated by spaces: ``". , ?"``.
        ``mapping`` lists ``SRC>DST`` pairs separated by spaces, an empty DST
        meaning drop: ``"!>. ;>, :>, ...>"``.
        """
        kept = tuple(keep.split())
        pairs: Dict[str, str] = {}
        for item in mapping.split():
            if ">" not in item:
                raise ValueError(f"Bad punctuation mapping {item!r}: expected SRC>DST, e.g. '!>.'")
            src, dst = item.split(">", 1)
            pairs[src] = dst
        return cls(keep=kept, mapping=pairs)

    def describe(self) -> str:
        mapped = " ".join(f"{s}>{d}" for s, d in sorted(self.mapping.items()))
        return f"keep={' '.join(self.keep)!r} map={mapped!r}"


DEFAULT_PUNCT = PunctConfig()


def words_and_marks(text: str, config: PunctConfig = DEFAULT_PUNCT) -> List[Tuple[str, str]]:
    """Parse a transcript into ``(word, mark)`` pairs, ``mark`` being "" or a kept mark.

    This is the single parser behind :func:`punctuated`, :func:`normalized`
    and the metrics.
    """
    text = fold_to_ascii(text)
    out: List[List[str]] = []
    resolve = config._table  # type: ignore[attr-defined]
    for word, mark in _TOKEN_RE.findall(text):
        if word:
            out.append([word, ""])
            continue
        if not out:
            continue  # a mark with no word before it
        if mark[0] == "." and len(mark) > 1:
            mark = ELLIPSIS
        elif mark[0] == "-":
            mark = DASH
        kept = resolve[mark]
        if not kept:
            continue
        prev = out[-1][1]
        if not prev or _PRIORITY[kept] < _PRIORITY[prev]:
            out[-1][1] = kept
    return [(w, m) for w, m in out]


def punctuated(text: str, config: PunctConfig = DEFAULT_PUNCT) -> str:
    """The P form: cased words, kept marks attached to the preceding word."""
    return " ".join(w + m for w, m in words_and_marks(text, config))


def normalized(text: str) -> str:
    """The N form: lowercase words, no marks, hyphenated words split."""
    return " ".join(_split_hyphens(w.lower() for w, _ in words_and_marks(text, _NO_MARKS)))


def punctuated_and_normalized(text: str, config: PunctConfig = DEFAULT_PUNCT) -> Tuple[str, str]:
    """Both forms from one parse."""
    pairs = words_and_marks(text, config)
    p = " ".join(w + m for w, m in pairs)
    n = " ".join(_split_hyphens(w.lower() for w, _ in pairs))
    return p, n


def scoring_pairs(text: str, config: PunctConfig = DEFAULT_PUNCT) -> List[Tuple[str, str]]:
    """``(word, mark)`` pairs with hyphenated words split, for scoring.

    Splitting hyphens in every view keeps the case- and punctuation-free view
    identical to N, so the differences between views (PuncER, CaseER) count
    only punctuation and case.
    """
    out: List[Tuple[str, str]] = []
    for word, mark in words_and_marks(text, config):
        if "-" in word:
            parts = word.split("-")
            out.extend((p, "") for p in parts[:-1])
            out.append((parts[-1], mark))
        else:
            out.append((word, mark))
    return out


def separate_marks(text: str, config: PunctConfig = DEFAULT_PUNCT) -> str:
    """P with marks as separate tokens (``done .``), the LibriSpeech-PC scoring layout."""
    toks: List[str] = []
    for w, m in words_and_marks(text, config):
        toks.append(w)
        if m:
            toks.append(m)
    return " ".join(toks)


def is_mark(token: str) -> bool:
    return token in _PRIORITY


def strip_marks(word: str) -> str:
    """A written word without the marks attached to its end: ``Hello,`` -> ``Hello``,
    ``Mr.`` -> ``Mr``; an apostrophe is part of the word (``don't``, ``Austens'``)."""
    end = len(word)
    while end > 0 and word[end - 1] in MARK_CHARS:
        end -= 1
    return word[:end]


def has_upper(word: str) -> bool:
    """True when a word carries case information (any uppercase letter)."""
    return word != word.lower()


def _split_hyphens(words: Iterable[str]) -> Iterable[str]:
    for w in words:
        if "-" in w:
            yield from w.split("-")
        else:
            yield w


_NO_MARKS = PunctConfig(keep=(), mapping={})


def parse_punct_args(keep: Optional[str], mapping: Optional[str]) -> PunctConfig:
    """Helper for scripts: ``--punct-keep`` / ``--punct-map`` to a config."""
    if keep is None and not mapping:
        return DEFAULT_PUNCT
    return PunctConfig.parse(keep if keep is not None else ". , ?", mapping or "")
