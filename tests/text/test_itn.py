"""Numbers as digits in P (``zipformer_pc.itn``, the runtime's ``--itn true``): a few hundred
generated sentences (a number, its spoken form by the speller below, its expected written form),
words that must stay words, word times after the rewrite, and the shipped model's P with and
without the rewrite."""

import json
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from zipformer_pc.itn import rewrite, rewrite_words
from zipformer_pc.runtime.recognizer import itn_words
from zipformer_pc.runtime.timestamps import TimedWord

ROOT = Path(__file__).resolve().parents[2]
PRETRAINED = ROOT / "egs" / "synth" / "pretrained"

# ---------------------------------------------------------------------------
# a small speller of numbers, written for the test

ONES = "zero one two three four five six seven eight nine".split()
TEENS = "ten eleven twelve thirteen fourteen fifteen sixteen seventeen eighteen nineteen".split()
TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()
ORDINAL_WORDS = {"one": "first", "two": "second", "three": "third", "five": "fifth", "eight": "eighth",
                 "nine": "ninth", "twelve": "twelfth"}
MONTHS = "January February March April May June July August September October November December".split()


def spell(n, use_and=True, hyphen=False):
    """English words of 0 <= n < 10**12 (British "and" after hundreds with ``use_and``)."""
    if n < 10:
        return ONES[n]
    if n < 20:
        return TEENS[n - 10]
    if n < 100:
        tens, ones = divmod(n, 10)
        return TENS[tens] + (("-" if hyphen else " ") + ONES[ones] if ones else "")
    joiner = " and " if use_and else " "
    if n < 1000:
        hundreds, rest = divmod(n, 100)
        return ONES[hundreds] + " hundred" + (joiner + spell(rest, use_and, hyphen) if rest else "")
    for scale, name in ((10 ** 9, "billion"), (10 ** 6, "million"), (1000, "thousand")):
        if n >= scale:
            head, rest = divmod(n, scale)
            words = spell(head, use_and, hyphen) + " " + name
            if not rest:
                return words
            return words + (joiner if rest < 100 else " ") + spell(rest, use_and, hyphen)
    raise AssertionError(n)


def spell_ordinal(n, hyphen=False):
    """first, twenty first (twenty-first with ``hyphen``), one hundred and twelfth, ..."""
    *head, last = spell(n).split()
    if last in ORDINAL_WORDS:
        last = ORDINAL_WORDS[last]
    elif last.endswith("y"):
        last = last[:-1] + "ieth"
    else:
        last += "th"
    if hyphen and head and head[-1] in TENS:
        return " ".join(head[:-1] + [head[-1] + "-" + last])
    return " ".join(head + [last])


def suffix(n):
    return "th" if n % 100 in (11, 12, 13) else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")


def spell_year(y, rng):
    """A year as people say it: nineteen ninety nine, seventeen oh five, eighteen hundred, two
    thousand and one, twenty twelve."""
    if 2000 <= y <= 2009:
        return "two thousand" + ("" if y == 2000 else rng.choice([" and ", " "]) + ONES[y - 2000])
    head, rest = divmod(y, 100)
    if y == 1000:
        return "one thousand"
    if rest == 0:
        return spell(head) + " hundred"
    if rest < 10:
        return spell(head) + " oh " + ONES[rest]
    return spell(head) + " " + spell(rest)


def cap(s):
    return s[:1].upper() + s[1:]


def written(n):
    """The cardinal as written: 2,500; 3 million."""
    for scale, name in ((10 ** 9, "billion"), (10 ** 6, "million")):
        if n >= scale and n % scale == 0 and n // scale < 1000:
            return f"{n // scale} {name}"
    return f"{n:,}"


def generated_cases(seed=79):
    """(spoken, expected) pairs: about 400 sentences with numbers of every kind."""
    rng = random.Random(seed)
    cases = []

    def number(lo, hi):
        return rng.randint(lo, hi)

    def style():
        return {"use_and": rng.random() < 0.5, "hyphen": rng.random() < 0.3}

    for _ in range(60):  # cardinals from 10, of every size
        n = rng.choice([number(10, 99), number(100, 999), number(1000, 99999), number(100000, 10 ** 9),
                        number(1, 999) * 10 ** 6])
        frame = rng.choice(["They counted {} sheep.", "{} men stood at the gate,", "and there were {} of them."])
        spoken = frame.format(spell(n, **style()))
        cases.append((cap(spoken) if frame[0] == "{" else spoken, frame.format(written(n))))
    for n in range(0, 10):  # zero to nine alone stay words
        cases.append((f"She had {ONES[n]} sisters.", f"She had {ONES[n]} sisters."))
    for _ in range(50):  # money
        d = rng.choice([number(1, 99), number(100, 99999)])
        if rng.random() < 0.4:
            c = number(1, 99)
            cases.append((f"It cost {spell(d, **style())} dollars and {spell(c)} cents.",
                          f"It cost ${d:,}.{c:02d}."))
        else:
            unit, sym = rng.choice([("dollars", "$"), ("euros", "€")])
            cases.append((f"He paid {spell(d, **style())} {unit}, she said.", f"He paid {sym}{d:,}, she said."))
    cases += [("One dollar.", "$1."), ("He lost five million dollars.", "He lost $5 million."),
              ("About fifty cents each.", "About 50 cents each."), ("It was a hundred dollars.", "It was $100.")]
    for _ in range(30):  # percentages, whole and decimal
        if rng.random() < 0.5:
            n = number(1, 100)
            cases.append((f"Nearly {spell(n)} {rng.choice(['percent', 'per cent'])} agreed.", f"Nearly {n}% agreed."))
        else:
            a, digits = number(0, 99), [number(0, 9) for _ in range(rng.randint(1, 2))]
            cases.append((f"It rose {spell(a)} point {' '.join(ONES[x] for x in digits)} percent.",
                          f"It rose {a}.{''.join(map(str, digits))}%."))
    for _ in range(60):  # years, with and without a year before them
        y = rng.choice([number(1300, 1999), number(1000, 1299), number(2000, 2009), number(2010, 2099)])
        frame = rng.choice(["In {}, the war ended.", "It happened in the summer of {}.", "She was born in May {}."]
                           + (["By {} it was over.", "They stayed until {}."] if y >= 1300 else []))
        # (before 1300 not after "by" or "until": "until twelve fifteen" is a clock time)
        cases.append((frame.format(spell_year(y, rng)), frame.format(y)))
    for y in (1812, 1905, 1999, 1776, 1340):  # 13xx to 19xx said as two numbers: a year anywhere
        cases.append((f"That was {spell_year(y, rng)}.", f"That was {y}."))
    for _ in range(50):  # dates
        day, month = number(1, 31), rng.choice(MONTHS)
        hyphen = rng.random() < 0.3
        frame = rng.choice(["It was the {d} of {m}.", "On {m} {d}, they met.", "Come on {m} the {d}."])
        cases.append((frame.format(d=spell_ordinal(day, hyphen), m=month), frame.format(d=f"{day}{suffix(day)}",
                                                                                       m=month)))
    for _ in range(15):  # a date and its year
        day, month, y = number(1, 31), rng.choice(MONTHS), number(1800, 1999)
        cases.append((f"It was the {spell_ordinal(day)} of {month}, {spell_year(y, rng)}.",
                      f"It was the {day}{suffix(day)} of {month}, {y}."))
    for _ in range(60):  # clock times
        h, m = number(1, 12), rng.choice([0, number(1, 9), number(10, 59)])
        minutes = "" if m == 0 else (" oh " + ONES[m] if m < 10 else " " + spell(m))
        clock = f"{h}:{m:02d}" if m else f"{h}"
        kind = rng.choice(["am", "a.m.", "pm", "oclock", "at", "half", "quarter_to", "minutes_past"])
        if kind in ("am", "a.m.", "pm"):
            said = {"am": "a m", "a.m.": "a.m.", "pm": "p m"}[kind]
            end = "" if said.endswith(".") else "."  # one period after a.m.
            cases.append((f"We left at {spell(h)}{minutes} {said}{end}", f"We left at {clock} {said[0]}.m."))
        elif kind == "oclock":
            cases.append((f"It struck {spell(h)} o'clock.", f"It struck {h} o'clock."))
        elif kind == "at" and m:
            cases.append((f"Meet me at {spell(h)}{minutes} tomorrow.", f"Meet me at {h}:{m:02d} tomorrow."))
        elif kind == "half":
            cases.append((f"It was half past {spell(h)}.", f"It was {h}:30."))
        elif kind == "quarter_to":
            cases.append((f"At a quarter to {spell(h)}, she came.", f"At {(h - 2) % 12 + 1}:45, she came."))
        else:
            k = number(1, 29)
            cases.append((f"It was {spell(k)} minutes past {spell(h)}.", f"It was {h}:{k:02d}."))
    for _ in range(25):  # ordinals from 10th
        n = rng.choice([number(10, 99), number(100, 999)])
        cases.append((f"It was the {spell_ordinal(n, rng.random() < 0.3)} time.", f"It was the {n}{suffix(n)} time."))
    return cases


# words that look like numbers but are not, and numbers left as words on purpose
UNCHANGED = [
    "He was the first to come, and a second later the third man followed.",
    "One of them said no one would come.",
    "It was a hundred years ago, a thousand times over.",
    "May I come in March, or in May?",
    "Henry the eighth married six times.",
    "At one point two men came in.",
    "She counted one, two, three.",
    "Call one two three four.",
    "It was a quarter of the whole.",
    "He gave half of it to them, past the gate.",
    "From twenty ten to twenty twenty.",
    "I am here, she said, at last.",
    "The forty-five-year-old man came.",
    "He weighed one hundred and sixty pounds" + ",",  # pounds is no currency: the number only
]


def test_a_few_hundred_generated_sentences_are_written_as_expected():
    cases = generated_cases()
    assert len(cases) >= 350
    bad = [(s, e, rewrite(s)) for s, e in cases if rewrite(s) != e]
    assert not bad, f"{len(bad)} of {len(cases)} wrong, e.g. {bad[:5]}"


def test_words_that_are_not_numbers_stay_words():
    for s in UNCHANGED[:-1]:
        assert rewrite(s) == s
    assert rewrite(UNCHANGED[-1]) == "He weighed 160 pounds,"


def test_the_issues_examples():
    assert rewrite("It was twenty five dollars.") == "It was $25."
    assert rewrite("It was the third of May.") == "It was the 3rd of May."
    assert rewrite("In nineteen ninety nine, and ten thirty a m.") == "In 1999, and 10:30 a.m."
    assert rewrite("We met at half past ten.") == "We met at 10:30."


def test_spans_cover_the_words_in_order_and_times_follow_the_rewrite():
    words = "Then twenty-five men, at half past ten, paid two hundred and fifty dollars.".split()
    spans = rewrite_words(words)
    assert [t for t, _, _ in spans] == ["Then", "25", "men,", "at", "10:30,", "paid", "$250."]
    covered = [k for _, a, b in spans for k in range(a, b + 1)]
    assert covered == list(range(len(words)))
    timed = [TimedWord(w, 0.5 * k, 0.5 * k + 0.4) for k, w in enumerate(words)]
    out = itn_words(timed)
    assert [w.word for w in out] == [t for t, _, _ in spans]
    for w, (_, a, b) in zip(out, spans):
        assert (w.start, w.end) == (timed[a].start, timed[b].end)
    assert rewrite_words([]) == [] and rewrite("") == ""


def test_every_generated_sentence_keeps_its_words_outside_the_numbers():
    """The rewrite changes the number spans only: each output word is an input word unless it
    stands for a span of a number."""
    for spoken, _ in generated_cases(seed=7):
        words = spoken.split()
        for text, a, b in rewrite_words(words):
            if a == b and text == words[a]:
                continue
            assert any(ch.isdigit() for ch in text), (spoken, text, words[a : b + 1])


# ---------------------------------------------------------------------------
# the shipped model: the command line and the Python API

SPOKEN = "She paid twenty five dollars for it. They met again at half past ten."


@pytest.fixture(scope="module")
def spoken(tmp_path_factory):
    if shutil.which("espeak-ng") is None:
        pytest.fail("espeak-ng is missing: tools/setup_env.sh installs it")
    wav = tmp_path_factory.mktemp("itn") / "paid.wav"
    subprocess.run(["espeak-ng", "-v", "en-us+m1", "-s", "165", "-w", str(wav), SPOKEN], check=True,
                   capture_output=True)
    return wav


def test_the_command_line_writes_digits_in_p_only_with_word_times_of_the_spans(spoken, tmp_path):
    got = {}
    for flag in ("false", "true"):
        out = tmp_path / f"{flag}.json"
        r = subprocess.run([sys.executable, "-m", "zipformer_pc.transcribe", "--model-dir", str(PRETRAINED), str(spoken),
                            "--itn", flag, "--format", "json", "--output", str(out)],
                           cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr[-3000:]
        got[flag] = json.loads(out.read_text(encoding="utf-8"))
    plain, digits = got["false"], got["true"]
    assert digits["text"]["N"] == plain["text"]["N"] and "twenty" in plain["text"]["N"]
    assert digits["text"]["P"] == rewrite(plain["text"]["P"]) != plain["text"]["P"]
    assert "25" in digits["text"]["P"], digits["text"]
    if "half past ten" in plain["text"]["P"].lower():  # the time, when the model heard it as said
        assert "10:30" in digits["text"]["P"], digits["text"]
    for a, b in zip(plain["segments"], digits["segments"]):
        assert b["words"]["N"] == a["words"]["N"] and b["tokens"] == a["tokens"]
        spoken_words = a["words"]["P"]
        for text, first, last in rewrite_words([w["word"] for w in spoken_words]):
            w = b["words"]["P"].pop(0)
            assert (w["word"], w["start"], w["end"]) == (text, spoken_words[first]["start"], spoken_words[last]["end"])
        assert not b["words"]["P"]


def test_the_python_api_rewrites_partial_and_final_p(spoken):
    from zipformer_pc.runtime import StreamingRecognizer, read_wav

    samples, rate = read_wav(str(spoken))
    plain = StreamingRecognizer.from_dir(PRETRAINED)
    digits = StreamingRecognizer.from_dir(PRETRAINED, itn=True)
    assert not plain.itn and digits.itn
    a, b = plain.recognize(samples, rate), digits.recognize(samples, rate)
    assert b["N"] == a["N"] and b["P"] == rewrite(a["P"]) and "25" in b["P"], (a, b)
    s = digits.create_stream()
    s.accept_waveform(rate, samples[: len(samples) // 2])
    digits.decode_stream(s)
    partial = digits.get_result(s)
    assert "twenty" not in partial["P"] and "twenty" in partial["N"], partial
