"""Inverse text normalization (ITN) of P text: numbers as digits.

The transducers write numbers as they are spoken ("twenty five dollars").
:func:`rewrite` gives P with digits where a reader expects them; N is left
spoken.  It works on P as the runtime writes it: cased words with their
marks attached, hyphenated compounds (``twenty-five``) as one word.  A mark
ends a number ("twenty, five" stays two), and the mark after a rewritten
span stays after it.  Pure Python, no dependencies: the runtime's light
import path is kept.

What is rewritten (the style of most English newspapers: words for zero to
nine alone, digits from 10 up and wherever a unit, a date or a clock needs
them):

* cardinals from 10: ``twenty five`` -> ``25``, ``two thousand five
  hundred`` -> ``2,500``, ``three million`` -> ``3 million``; ``four and
  twenty`` -> ``24``; ``three point five`` -> ``3.5``; zero to nine alone,
  ``a hundred`` and ``a thousand`` stay words;
* money and percentages, any amount: ``twenty five dollars`` -> ``$25``,
  ``two dollars and fifty cents`` -> ``$2.50``, ``five million dollars`` ->
  ``$5 million``, ``five euros`` -> ``€5``, ``fifty cents`` -> ``50
  cents``, ``fifty percent`` / ``per cent`` -> ``50%`` (``pounds`` is left
  alone: a weight as often as money);
* ordinals from 10th (``the twenty first century`` -> ``the 21st
  century``) and any ordinal in a date: ``the third of May`` -> ``the 3rd of
  May``, ``May third`` -> ``May 3rd``, ``May the third`` -> ``May the
  3rd``; first to ninth stay words elsewhere (``the first time``, ``a
  second later``);
* years: ``nineteen ninety nine`` -> ``1999`` and ``seventeen oh five`` ->
  ``1705`` (13xx to 19xx as two numbers, never a cardinal); ``twenty ten``,
  ``eleven hundred``, ``two thousand and one`` and the like only where a
  year is expected: after a month, ``in``, ``since``, ``until``, ``by``,
  ``during``, ``year``, ``the summer of`` ... (else they are cardinals);
* clock times: ``ten thirty a m`` / ``ten thirty a.m.`` -> ``10:30 a.m.``,
  ``seven p m`` -> ``7 p.m.``, ``five o'clock`` -> ``5 o'clock``, ``at
  ten thirty`` -> ``at 10:30`` (after ``at``, ``by``, ``until`` ...), ``half
  past ten`` -> ``10:30``, ``a quarter to five`` -> ``4:45``, ``twenty
  minutes past six`` -> ``6:20``.

:func:`rewrite_words` says which words each output word came from, so word
timestamps follow the rewrite: a rewritten span starts where its first word
starts and ends where its last word ends.
"""

from dataclasses import dataclass
from typing import Callable, List, Optional, Sequence, Tuple

from zipformer_pc.text import strip_marks

ONES = {"zero": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8,
        "nine": 9}
TEENS = {"ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14, "fifteen": 15, "sixteen": 16,
         "seventeen": 17, "eighteen": 18, "nineteen": 19}
TENS = {"twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70, "eighty": 80,
        "ninety": 90}
SCALES = {"thousand": 10 ** 3, "million": 10 ** 6, "billion": 10 ** 9, "trillion": 10 ** 12}
ORDINALS = {"first": 1, "second": 2, "third": 3, "fourth": 4, "fifth": 5, "sixth": 6, "seventh": 7, "eighth": 8,
            "ninth": 9, "tenth": 10, "eleventh": 11, "twelfth": 12, "thirteenth": 13, "fourteenth": 14,
            "fifteenth": 15, "sixteenth": 16, "seventeenth": 17, "eighteenth": 18, "nineteenth": 19,
            "twentieth": 20, "thirtieth": 30, "fortieth": 40, "fiftieth": 50, "sixtieth": 60, "seventieth": 70,
            "eightieth": 80, "ninetieth": 90}
ORDINAL_SCALES = {"hundredth": 100, "thousandth": 10 ** 3, "millionth": 10 ** 6, "billionth": 10 ** 9}
MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
          "november", "december")
# months that are also common words: a month only when capitalized ("May", not "may")
AMBIGUOUS_MONTHS = ("may", "march")
# the word before a year (or a clock time: TIME_WORDS)
YEAR_WORDS = {"in", "since", "until", "till", "by", "during", "before", "after", "year", "circa", "around"}
SEASONS = {"spring", "summer", "autumn", "fall", "winter", "year", "end", "beginning", "start", "middle",
           "course", "years"}
TIME_WORDS = {"at", "by", "until", "till", "before", "after", "around", "about", "from", "to", "since"}
MONEY = {"dollar": "$", "dollars": "$", "euro": "€", "euros": "€"}


def _is_number_word(t: str) -> bool:
    return t in ONES or t in TEENS or t in TENS or t in SCALES or t == "hundred"


@dataclass
class _Part:
    """A word, or one part of a hyphenated word, lowercased and without marks."""

    text: str
    word: int  # index of its word
    first: bool  # the word's first part
    last: bool  # the word's last part


def ordinal_suffix(n: int) -> str:
    if n % 100 in (11, 12, 13):
        return "th"
    return {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")


def _join_marks(text: str, marks: str) -> str:
    """A rewritten span's text followed by the marks of its last word (one period only after
    ``a.m.``)."""
    if text.endswith(".") and marks.startswith("."):
        marks = marks[1:]
    return text + marks


class _Parser:
    """The rewrite of one word sequence (see :func:`rewrite_words`)."""

    def __init__(self, words: Sequence[str]) -> None:
        self.words = list(words)
        self.cores = [strip_marks(w) for w in self.words]
        self.marks = [w[len(c):] for w, c in zip(self.words, self.cores)]
        self.parts: List[_Part] = []
        self.first_part: List[int] = []
        for k, core in enumerate(self.cores):
            self.first_part.append(len(self.parts))
            pieces = core.lower().split("-") if "-" in core.strip("-") else [core.lower()]
            if any(not p for p in pieces):  # a stray hyphen: the word as it is
                pieces = [core.lower()]
            for n, piece in enumerate(pieces):
                self.parts.append(_Part(piece, k, n == 0, n == len(pieces) - 1))
        self.first_part.append(len(self.parts))

    # -- access -------------------------------------------------------------

    def t(self, i: int) -> str:
        """Part ``i``'s text ("" past the end)."""
        return self.parts[i].text if 0 <= i < len(self.parts) else ""

    def cont(self, i: int) -> bool:
        """Whether a number may go on from part ``i`` to part ``i + 1``: there is one, and no mark
        comes between them."""
        if i + 1 >= len(self.parts):
            return False
        p = self.parts[i]
        return not (p.last and self.marks[p.word])

    def nxt(self, i: int) -> str:
        """The text of part ``i`` when a number may go on into it from ``i - 1``, else ""."""
        return self.t(i) if i > 0 and self.cont(i - 1) else ""

    def word_before(self, i: int, back: int = 1) -> str:
        """The lowercased word ``back`` words before part ``i``'s word ("" at the start)."""
        k = self.parts[i].word - back
        return self.cores[k].lower() if k >= 0 else ""

    def mark_before(self, i: int) -> bool:
        """Whether the word before part ``i``'s word ends with a mark."""
        k = self.parts[i].word - 1
        return k >= 0 and bool(self.marks[k])

    def is_month(self, k: int) -> bool:
        """Whether word ``k`` is a month (``May`` and ``March`` only capitalized)."""
        if not 0 <= k < len(self.words):
            return False
        low = self.cores[k].lower()
        return low in MONTHS and (low not in AMBIGUOUS_MONTHS or self.cores[k][:1].isupper())

    # -- numbers ------------------------------------------------------------

    def sub100(self, i: int) -> Optional[Tuple[int, int]]:
        """0..99 at part ``i``: ``(value, end)``."""
        t = self.t(i)
        if t in TENS:
            if self.nxt(i + 1) in ONES and ONES[self.t(i + 1)] > 0:
                return TENS[t] + ONES[self.t(i + 1)], i + 2
            return TENS[t], i + 1
        if t in TEENS:
            return TEENS[t], i + 1
        if t in ONES:
            return ONES[t], i + 1
        return None

    def group(self, i: int, allow_a: bool = False, teen_hundreds: bool = False) -> Optional[Tuple[int, int]]:
        """0..999 at part ``i`` (``a hundred`` with ``allow_a``; ``fifteen hundred`` and the like,
        up to 9,999, with ``teen_hundreds``): ``(value, end)``."""
        first = self.sub100(i)
        if first is None and allow_a and self.t(i) == "a":
            first = (1, i + 1)
        if first is None:
            return None
        v, j = first
        if self.nxt(j) == "hundred" and (1 <= v <= 9 or (teen_hundreds and 11 <= v <= 99 and v % 10 != 0)):
            v, j = v * 100, j + 1
            rest = self._and_sub100(j)
            if rest is not None:
                v, j = v + rest[0], rest[1]
            return v, j
        if self.t(i) == "a":
            return None  # "a" is a number only before "hundred" (or a scale, see cardinal)
        return v, j

    def _and_sub100(self, j: int) -> Optional[Tuple[int, int]]:
        """1..99 at part ``j``, or after an ``and`` there: ``(value, end)``."""
        k = j + 1 if self.nxt(j) == "and" else j
        if not self.nxt(k):
            return None
        got = self.sub100(k)
        if got is None or got[0] == 0:
            return None
        return got

    def cardinal(self, i: int, allow_a: bool = False) -> Optional[Tuple[int, int, int]]:
        """A whole number at part ``i``: ``(value, end, scale)``, where ``scale`` is the scale word
        it ends with (10**6 for "three million"; 1 when none).  ``allow_a``: ``a hundred``,
        ``a thousand`` are numbers."""
        if allow_a and self.t(i) == "a" and self.nxt(i + 1) in SCALES:
            g: Optional[Tuple[int, int]] = (1, i + 1)
        else:
            g = self.group(i, allow_a, teen_hundreds=True)
        if g is None:
            return None
        total, last_scale = 0, 0
        while True:
            v, j = g
            scale = SCALES.get(self.nxt(j), 0)
            if not (scale and 0 < v < 1000 and (not last_scale or scale < last_scale)):
                return total + v, j, 1
            total, last_scale, j = total + v * scale, scale, j + 1
            if self.nxt(j) == "and":  # "two thousand and five": the last group
                rest = self._and_sub100(j)
                return (total + rest[0], rest[1], 1) if rest is not None else (total, j, scale)
            g = self.group(j) if self.nxt(j) else None
            if g is None or g[0] == 0 or g[0] >= scale:
                return total, j, scale

    def decimal(self, i: int, allow_a: bool = False) -> Optional[Tuple[str, int, int]]:
        """A cardinal, with ``point`` and digits after it when they follow: ``(written, end, scale)``,
        written without thousands separators (the caller formats)."""
        c = self.cardinal(i, allow_a)
        if c is None:
            return None
        v, j, scale = c
        at_one_point = self.t(i) == "one" and j == i + 1 and self.word_before(i) == "at"
        if scale == 1 and self.nxt(j) == "point" and not at_one_point:
            digits, k = "", j + 1
            while self.nxt(k) in ONES or self.nxt(k) == "oh":
                digits += "0" if self.t(k) == "oh" else str(ONES[self.t(k)])
                k += 1
            if digits and self.nxt(k) in SCALES and v < 1000:  # "two point five million"
                return f"{v}.{digits}", k + 1, SCALES[self.t(k)]
            if digits:
                return f"{v}.{digits}", k, 1
        if scale >= 10 ** 6 and v % scale == 0:
            return str(v // scale), j, scale  # "three million": 3 of them
        return str(v), j, min(scale, 1000)

    def ordinal(self, i: int) -> Optional[Tuple[int, int]]:
        """An ordinal at part ``i``: ``(value, end)`` (``twenty first`` -> 21, ``hundredth`` -> 100)."""
        t = self.t(i)
        if t in ORDINALS:
            return ORDINALS[t], i + 1
        if t in ORDINAL_SCALES:
            return ORDINAL_SCALES[t], i + 1
        c = self.cardinal(i)
        if c is None:
            return None
        v, j, _ = c
        k = j + 1 if self.nxt(j) == "and" and v % 100 == 0 else j
        o = self.nxt(k)
        if o in ORDINALS:
            n = ORDINALS[o]
            if n < 10 and (v % 10 != 0 or (v < 20 and v != 0)):
                return None
            if n >= 10 and v % 100 != 0:
                return None
            return v + n, k + 1
        if o in ORDINAL_SCALES and 0 < v < 1000 and k == j:
            return v * ORDINAL_SCALES[o], k + 1
        return None

    # -- formats ------------------------------------------------------------

    @staticmethod
    def number(written: str, scale: int) -> str:
        """``2500`` -> ``2,500``; ``3`` with scale 10**6 -> ``3 million``."""
        if scale >= 10 ** 6:
            name = next(k for k, v in SCALES.items() if v == scale)
            return f"{written} {name}"
        whole, dot, frac = written.partition(".")
        return f"{int(whole):,}" + dot + frac

    # -- the rewrites, tried in this order at each word -------------------

    def am_pm(self, j: int) -> Optional[Tuple[str, int]]:
        """``a.m.`` / ``p.m.`` spelled as the model may write it, at part ``j`` (which a number ends
        before): ``(written, end)``."""
        if not (j < len(self.parts) and self.cont(j - 1) and self.parts[j].first):
            return None
        k = self.parts[j].word
        core, low = self.cores[k], self.cores[k].lower()
        if low in ("a.m", "p.m", "pm") or core in ("AM", "PM"):
            return low[0] + ".m.", self.first_part[k + 1]
        if low in ("a", "p") and self.marks[k] in ("", ".") and k + 1 < len(self.words) \
                and self.cores[k + 1].lower() == "m":
            return low + ".m.", self.first_part[k + 2]
        return None

    def hour(self, i: int) -> Optional[int]:
        t = self.t(i)
        v = ONES.get(t, TEENS.get(t))
        return v if v is not None and 1 <= v <= 12 else None

    def minutes(self, i: int) -> Optional[Tuple[int, int]]:
        """``oh five`` or 10..59 at part ``i``: ``(minutes, end)``."""
        if self.t(i) in ("oh", "o") and self.nxt(i + 1) in ONES and ONES[self.t(i + 1)] > 0:
            return ONES[self.t(i + 1)], i + 2
        got = self.sub100(i)
        if got is not None and 10 <= got[0] <= 59:
            return got
        return None

    def clock(self, i: int) -> Optional[Tuple[str, int]]:
        h = self.hour(i)
        if h is None:
            return None
        m = self.minutes(i + 1) if self.nxt(i + 1) else None
        end, text = (m[1], f"{h}:{m[0]:02d}") if m else (i + 1, str(h))
        ampm = self.am_pm(end)
        if ampm:
            return f"{text} {ampm[0]}", ampm[1]
        if m is None and self.nxt(i + 1) == "o'clock":
            return f"{h} o'clock", i + 2
        if m is not None and self.word_before(i) in TIME_WORDS and not self.mark_before(i):
            return text, end
        return None

    def relative_time(self, i: int) -> Optional[Tuple[str, int]]:
        """``half past ten``, ``a quarter to five``, ``twenty minutes past six``, ``ten past six``."""
        j, minutes = i, None
        if self.t(i) == "half":
            minutes, j = 30, i + 1
        elif self.t(i) == "quarter" or (self.t(i) == "a" and self.nxt(i + 1) == "quarter"):
            minutes, j = 15, (i + 1 if self.t(i) == "quarter" else i + 2)
        else:
            got = self.sub100(i)
            if got is not None and 1 <= got[0] <= 29:
                minutes, j = got
                if self.nxt(j) in ("minute", "minutes"):
                    j += 1
                elif not (minutes in (5, 10, 20, 25) and self.nxt(j) == "past"):
                    return None
        if minutes is None:
            return None
        direction = self.nxt(j)
        if direction not in ("past", "to") or (direction == "to" and minutes == 30):
            return None
        h = self.hour(j + 1) if self.nxt(j + 1) else None
        if h is None or (self.nxt(j + 2) in ONES or self.nxt(j + 2) in TENS or self.nxt(j + 2) in TEENS):
            return None
        if direction == "to":
            h, minutes = (h - 2) % 12 + 1, 60 - minutes
        text, end = f"{h}:{minutes:02d}", j + 2
        ampm = self.am_pm(end)
        if ampm:
            return f"{text} {ampm[0]}", ampm[1]
        return text, end

    def money(self, i: int) -> Optional[Tuple[str, int]]:
        """An amount and its unit: dollars (and cents), euros, cents, percent."""
        d = self.decimal(i, allow_a=True)
        if d is None:
            return None
        written, j, scale = d
        unit = self.nxt(j)
        if unit == "per" and self.nxt(j + 1) == "cent":
            return self.number(written, scale) + "%", j + 2
        if unit == "percent":
            return self.number(written, scale) + "%", j + 1
        if unit in ("cent", "cents") and scale < 10 ** 6 and "." not in written:
            return f"{self.number(written, 1)} {unit}", j + 1
        if unit not in MONEY:
            return None
        symbol, end = MONEY[unit], j + 1
        if scale < 10 ** 6 and "." not in written and self.nxt(end) == "and":
            cents = self.sub100(end + 1) if self.nxt(end + 1) else None
            if cents is not None and self.nxt(cents[1]) in ("cent", "cents") and cents[0] > 0:
                return f"{symbol}{self.number(written, 1)}.{cents[0]:02d}", cents[1] + 1
        return symbol + self.number(written, scale), end

    def date_ordinal(self, i: int) -> Optional[Tuple[str, int]]:
        """A day of a month: ``the third of May``, ``May third``, ``May the third``."""
        o = self.ordinal(i)
        if o is None or not 1 <= o[0] <= 31:
            return None
        n, j = o
        k = self.parts[i].word
        after = (self.nxt(j) == "of" and self.parts[j].first
                 and self.is_month(self.parts[j].word + 1) and self.cont(j))
        before = (not self.mark_before(i)
                  and (self.is_month(k - 1) or (self.word_before(i) == "the" and self.is_month(k - 2)
                                                and not self.marks[k - 2])))
        if after or before:
            return f"{n}{ordinal_suffix(n)}", j
        return None

    def year_context(self, i: int) -> bool:
        """Whether a year is expected at part ``i``: after a month (and its day), a year word, a
        season and ``of``."""
        k = self.parts[i].word
        before = self.word_before(i)
        if self.is_month(k - 1):
            return True
        if self.mark_before(i) and not (k >= 2 and (self.is_month(k - 2) or self.is_month(k - 3))):
            return False
        if before in YEAR_WORDS:
            return True
        if before == "of" and self.word_before(i, 2) in SEASONS:
            return True
        # "May third, 1999" / "the third of May, 1999"
        prev = self.cores[k - 1].lower() if k >= 1 else ""
        return (prev in ORDINALS or prev.rstrip("stndrdth").isdigit()) and (self.is_month(k - 2) or self.is_month(k - 3))

    def year(self, i: int) -> Optional[Tuple[str, int]]:
        """``nineteen ninety nine``, ``seventeen oh five``; ``twenty ten``, ``eleven hundred``, ``two
        thousand and one`` where a year is expected."""
        expected = self.year_context(i)
        head = self.sub100(i)
        if head is not None and 10 <= head[0] <= 20 and head[1] == i + 1 and self.nxt(i + 1):
            h, j = head[0], i + 1
            tail = None
            if self.t(j) in ("oh", "o") and self.nxt(j + 1) in ONES and ONES[self.t(j + 1)] > 0:
                tail = (ONES[self.t(j + 1)], j + 2)
            else:
                got = self.sub100(j)
                if got is not None and got[0] >= 10:
                    tail = got
            if tail is not None and (expected or 13 <= h <= 19):
                return str(h * 100 + tail[0]), tail[1]
        if expected:
            c = self.cardinal(i)
            if c is not None and 1000 <= c[0] <= 2099:
                return str(c[0]), c[1]
        return None

    def plain(self, i: int) -> Optional[Tuple[str, int]]:
        """Cardinals from 10 (decimals of any size), ordinals from 10th; ``four and twenty``."""
        if self.t(i) in ONES and 0 < ONES[self.t(i)] and self.nxt(i + 1) == "and" and self.nxt(i + 2) in TENS \
                and not _is_number_word(self.nxt(i + 3)) and self.word_before(i) not in ("between", "from"):
            return str(TENS[self.t(i + 2)] + ONES[self.t(i)]), i + 3  # "four and twenty"
        if i > 0 and self.cont(i - 1) and _is_number_word(self.t(i - 1)):
            return None  # after a number that did not take it: "twenty ten", "one twenty"
        o = self.ordinal(i)
        if o is not None:
            return (f"{o[0]:,}{ordinal_suffix(o[0])}", o[1]) if o[0] >= 10 else None
        d = self.decimal(i, allow_a=True)
        if d is None:
            return None
        written, j, scale = d
        if self.t(i) == "a" and j <= i + 2:
            return None  # "a hundred", "a thousand": words
        if "." not in written and scale == 1 and int(written) < 10:
            return None
        if _is_number_word(self.nxt(j)):
            return None  # numbers side by side that make no one number: words
        return self.number(written, scale), j

    # -- the whole sequence -------------------------------------------------

    def run(self) -> List[Tuple[str, int, int]]:
        rules: Tuple[Callable[[int], Optional[Tuple[str, int]]], ...] = (
            self.clock, self.relative_time, self.money, self.date_ordinal, self.year, self.plain)
        out: List[Tuple[str, int, int]] = []
        k = 0
        while k < len(self.words):
            i = self.first_part[k]
            done = False
            if self.parts[i].text:
                for rule in rules:
                    got = rule(i)
                    if got is None:
                        continue
                    text, j = got
                    if j <= i or not self.parts[j - 1].last:
                        continue  # a number ending inside a hyphenated word: not rewritten
                    last = self.parts[j - 1].word
                    out.append((_join_marks(text, self.marks[last]), k, last))
                    k, done = last + 1, True
                    break
            if not done:
                out.append((self.words[k], k, k))
                k += 1
        return out


def rewrite_words(words: Sequence[str]) -> List[Tuple[str, int, int]]:
    """The P words (marks attached) with numbers as digits: ``(written, first, last)`` per output
    word, ``first`` and ``last`` the indices of the input words it stands for (equal for a word left
    as it is).  The spans cover the input in order, each word once."""
    return _Parser(words).run() if words else []


def rewrite(text: str) -> str:
    """P text with numbers as digits (see the module's doc).

    >>> rewrite("It cost twenty five dollars, on the third of May, nineteen ninety nine.")
    'It cost $25, on the 3rd of May, 1999.'
    >>> rewrite("We met at half past ten, and again at ten thirty p m.")
    'We met at 10:30, and again at 10:30 p.m.'
    >>> rewrite("A second later, the first of them saw two hundred and fifty men.")
    'A second later, the first of them saw 250 men.'
    """
    return " ".join(w for w, _, _ in rewrite_words(text.split()))
