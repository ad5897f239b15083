"""Tests of zipformer_pc.metrics against the definitions in its docstring.

Every expected number below is derived by hand in the comments, from the
definitions (Cui et al. 2023; Meister et al. 2023 / LibriSpeech-PC), not by
running the code.  Notation: ``E_v`` = edit distance in view ``v``, ``N_v`` =
reference length in view ``v``; ``N_p`` = reference marks, ``N_c`` =
reference words carrying an uppercase letter.
"""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zipformer_pc.metrics import (
    paired_bootstrap,
    TABLE_COLUMNS,
    compare_systems,
    mapsswe,
    markdown_header,
    markdown_row,
    per_mark_table,
    score_corpus,
    score_utterance,
    word_errors,
    write_error_file,
)
from zipformer_pc.text import PunctConfig

COUNT_KEYS = ("E_np_nc", "N_np_nc", "E_np_c", "E_p_nc", "N_p_nc", "E_p_c", "N_p_c", "N_p", "N_c")
RATE_KEYS = ("wer", "wer_c", "wer_p", "pc_wer", "wer_pc", "punc_er", "case_er", "per")


def summarize(pairs, config=None):
    if isinstance(pairs, tuple):
        pairs = [pairs]
    pairs = [(f"utt{i}", r, h) for i, (r, h) in enumerate(pairs)]
    score = score_corpus(pairs) if config is None else score_corpus(pairs, config)
    return score.summary()


def approx(x):
    return pytest.approx(x, rel=1e-9, abs=1e-9)


def check(summary, counts, rates):
    got_counts = {k: summary["counts"][k] for k in counts}
    assert got_counts == counts
    for k, v in rates.items():
        if v is None:
            assert summary[k] is None, k
        else:
            assert summary[k] == approx(v), k


# ------------------------------------------------------------- worked examples


def test_paper_example_missing_period_default_config():
    # LibriSpeech-PC: ref "I was done ." hyp "I was done".
    # Marks: ref [.], hyp [] -> D=1, C=S=I=0 -> PER = 1/1 = 100.
    # P-C view: ref "I was done ." (4 tokens), hyp "I was done" -> 1 deletion -> 25.
    s = summarize(("I was done .", "I was done"))
    assert s["per"] == approx(100.0)
    assert s["wer_pc"] == approx(25.0)
    assert s["pc_wer"] == approx(25.0)


def test_paper_example_lets_eat_bob():
    # Keep ". , ? !": ref "Let's eat , Bob !" hyp "Let's eat Bob !".
    # Marks: ref [, !], hyp [!]; "!" aligns with "!" (C=1), "," deleted (D=1)
    # -> PER = 1/(1+1) = 50.  P-C: 5 ref tokens, 1 deletion -> 20.
    s = summarize(("Let's eat , Bob !", "Let's eat Bob !"), PunctConfig.parse(". , ? !"))
    assert s["per"] == approx(50.0)
    assert s["wer_pc"] == approx(20.0)


# ------------------------------------------------------------- hand-computed cases


def test_pure_case_error():
    # ref "Hello world." hyp "hello world."
    # np_nc: hello world / hello world        E=0 N=2
    # np_c : Hello world / hello world        E=1 (Hello->hello)
    # p_nc : hello world . / hello world .     E=0 N=3
    # p_c  : Hello world . / hello world .     E=1 N=3
    # N_p=1 (.), N_c=1 (Hello)
    # WER 0, WER-C 1/2=50, WER-P 0, PC-WER 1/3, PuncER 0/1=0, CaseER (1-0)/1=100, PER 0.
    s = summarize(("Hello world.", "hello world."))
    check(
        s,
        dict(E_np_nc=0, N_np_nc=2, E_np_c=1, E_p_nc=0, N_p_nc=3, E_p_c=1, N_p_c=3, N_p=1, N_c=1),
        dict(wer=0, wer_c=50, wer_p=0, pc_wer=100 / 3, wer_pc=100 / 3, punc_er=0, case_er=100, per=0),
    )


def test_pure_punctuation_deletion():
    # ref "Hello world, friends." hyp "Hello world friends."
    # np views identical (3 words) -> E_np_nc = E_np_c = 0
    # p_nc: hello world , friends . (5) vs hello world friends . (4) -> E=1
    # p_c : same, E=1.  N_p=2, N_c=1 (Hello).
    # PuncER = (1-0)/2 = 50; CaseER = 0/1 = 0; WER-P = PC-WER = 1/5 = 20.
    # PER: "." C=1, "," D=1 -> 1/2 = 50.
    s = summarize(("Hello world, friends.", "Hello world friends."))
    check(
        s,
        dict(E_np_nc=0, N_np_nc=3, E_np_c=0, E_p_nc=1, N_p_nc=5, E_p_c=1, N_p_c=5, N_p=2, N_c=1),
        dict(wer=0, wer_c=0, wer_p=20, pc_wer=20, punc_er=50, case_er=0, per=50),
    )
    assert s["per_counts"] == dict(C=1, S=0, D=1, I=0, N_ref=2, N_hyp=1)


def test_punctuation_substitution_comma_to_period():
    # ref "yes, sir" hyp "yes. sir": one substituted mark.
    # p_nc: yes , sir / yes . sir -> E=1, N=3.  N_p=1, N_c=0.
    # PuncER = 1/1 = 100; CaseER undefined (no cased reference word) -> None.
    # PER: the masked positions align, marks differ -> S=1, C=D=I=0 -> 100.
    s = summarize(("yes, sir", "yes. sir"))
    check(
        s,
        dict(E_np_nc=0, N_np_nc=2, E_np_c=0, E_p_nc=1, N_p_nc=3, E_p_c=1, N_p_c=3, N_p=1, N_c=0),
        dict(wer=0, wer_c=0, wer_p=100 / 3, pc_wer=100 / 3, punc_er=100, case_er=None, per=100),
    )
    assert s["per_counts"] == dict(C=0, S=1, D=0, I=0, N_ref=1, N_hyp=1)
    assert s["per_marks"][","]["S_to"] == {".": 1}


def test_word_error_is_neither_punctuation_nor_case_error():
    # ref "The Cat sat." hyp "The bat sat.": a word substitution at a cased word.
    # np_nc: the cat sat / the bat sat -> E=1;  np_c: The Cat sat / The bat sat -> E=1
    # p_nc / p_c: 4 tokens, E=1.  N_p=1, N_c=2 (The, Cat).
    # WER = WER-C = 1/3; WER-P = PC-WER = 1/4; PuncER = (1-1)/1 = 0;
    # CaseER = (1-1)/2 = 0; PER: "." C=1 -> 0.
    s = summarize(("The Cat sat.", "The bat sat."))
    check(
        s,
        dict(E_np_nc=1, N_np_nc=3, E_np_c=1, E_p_nc=1, N_p_nc=4, E_p_c=1, N_p_c=4, N_p=1, N_c=2),
        dict(wer=100 / 3, wer_c=100 / 3, wer_p=25, pc_wer=25, punc_er=0, case_er=0, per=0),
    )


def test_mixed_word_case_and_punctuation_errors():
    # ref "Good morning, Sir." hyp "good evening Sir?"
    # np_nc: good morning sir / good evening sir   -> E=1 (morning->evening), N=3
    # np_c : Good morning Sir / good evening Sir   -> E=2 (+ Good->good)
    # p_nc : good morning , sir . / good evening sir ?  -> E=3 (sub, del ",", . -> ?), N=5
    # p_c  : Good morning , sir . / good evening Sir ? -> E=4, N=5
    # N_p=2, N_c=2 (Good, Sir)
    # WER 1/3, WER-C 2/3, WER-P 3/5=60, PC-WER 4/5=80,
    # PuncER (3-1)/2 = 100, CaseER (2-1)/2 = 50.
    # PER: ref marks [, .], hyp [?]; masked: good morning M sir M / good evening sir M
    # -> "." aligned with "?" (S=1), "," deleted (D=1), C=0 -> PER = 2/2 = 100.
    s = summarize(("Good morning, Sir.", "good evening Sir?"))
    check(
        s,
        dict(E_np_nc=1, N_np_nc=3, E_np_c=2, E_p_nc=3, N_p_nc=5, E_p_c=4, N_p_c=5, N_p=2, N_c=2),
        dict(wer=100 / 3, wer_c=200 / 3, wer_p=60, pc_wer=80, punc_er=100, case_er=50, per=100),
    )
    assert s["per_counts"] == dict(C=0, S=1, D=1, I=0, N_ref=2, N_hyp=1)


@pytest.mark.parametrize(
    "ref, hyp",
    [
        ("thick, peppered, flour-fattened sauce.", "thick, peppered, flour fattened sauce."),
        ("thick, peppered, flour fattened sauce.", "thick, peppered, flour-fattened sauce."),
    ],
)
def test_hyphenated_word_equals_split_words(ref, hyp):
    # Hyphenated words are split in every view, so "flour-fattened" and
    # "flour fattened" are the same two tokens: no error anywhere.
    # Words: thick peppered flour fattened sauce (5); marks , , . (3) -> 8 p-tokens.
    s = summarize((ref, hyp))
    check(
        s,
        dict(E_np_nc=0, N_np_nc=5, E_np_c=0, E_p_nc=0, N_p_nc=8, E_p_c=0, N_p_c=8, N_p=3, N_c=0),
        dict(wer=0, wer_c=0, wer_p=0, pc_wer=0, punc_er=0, case_er=None, per=0),
    )


def test_empty_hypothesis():
    # ref "Hello world." hyp "": everything deleted.
    # E_np_nc = E_np_c = 2, E_p_nc = E_p_c = 3; N_p=1, N_c=1.
    # PuncER = (3-2)/1 = 100; CaseER = (2-2)/1 = 0; PER: D=1 -> 100.
    s = summarize(("Hello world.", ""))
    check(
        s,
        dict(E_np_nc=2, N_np_nc=2, E_np_c=2, E_p_nc=3, N_p_nc=3, E_p_c=3, N_p_c=3, N_p=1, N_c=1),
        dict(wer=100, wer_c=100, wer_p=100, pc_wer=100, punc_er=100, case_er=0, per=100),
    )
    assert s["per_counts"] == dict(C=0, S=0, D=1, I=0, N_ref=1, N_hyp=0)


def test_empty_reference_alone_has_undefined_rates_but_counts_insertions():
    # ref "" hyp "Hi there.": all reference counts 0, so every Cui rate is
    # undefined (None), but the insertions are counted: E_np=2, E_p=3.
    # PER: I=1, nothing else -> 1/1 = 100 (its denominator is I+D+S+C).
    s = summarize(("", "Hi there."))
    check(
        s,
        dict(E_np_nc=2, N_np_nc=0, E_np_c=2, E_p_nc=3, N_p_nc=0, E_p_c=3, N_p_c=0, N_p=0, N_c=0),
        dict(wer=None, wer_c=None, wer_p=None, pc_wer=None, punc_er=None, case_er=None, per=100),
    )
    assert s["per_counts"] == dict(C=0, S=0, D=0, I=1, N_ref=0, N_hyp=1)


def test_empty_reference_insertions_count_in_corpus():
    # u0: "Good morning." correct: E=0, N_np=2, N_p-tokens=3, N_p=1, N_c=1, "." C=1
    # u1: "" vs "Hi there.": E_np_nc=E_np_c=2, E_p_nc=E_p_c=3, "." I=1
    # WER 2/2=100, WER-C 2/2, WER-P 3/3, PC-WER 3/3, PuncER (3-2)/1=100,
    # CaseER (2-2)/1=0, PER (I=1)/(1+C=1)=50.
    s = summarize([("Good morning.", "Good morning."), ("", "Hi there.")])
    check(
        s,
        dict(E_np_nc=2, N_np_nc=2, E_np_c=2, E_p_nc=3, N_p_nc=3, E_p_c=3, N_p_c=3, N_p=1, N_c=1),
        dict(wer=100, wer_c=100, wer_p=100, pc_wer=100, punc_er=100, case_er=0, per=50),
    )


def test_per_compares_words_case_insensitively():
    # Case differences must not disturb the PER alignment: both marks correct.
    s = summarize(("Hello, World.", "hello, world."))
    assert s["per_counts"] == dict(C=2, S=0, D=0, I=0, N_ref=2, N_hyp=2)
    assert s["per"] == approx(0.0)


def test_per_moved_mark_is_deletion_plus_insertion():
    # ref "a, b c" hyp "a b, c": masked a M b c / a b M c.  The mark follows a
    # different word, so it cannot be Correct or Substituted: D=1, I=1 -> PER 100.
    s = summarize(("a, b c", "a b, c"))
    assert s["per_counts"] == dict(C=0, S=0, D=1, I=1, N_ref=1, N_hyp=1)
    assert s["per"] == approx(100.0)


def test_wer_pc_and_pc_wer_are_the_same_metric():
    # marks are tokens and case counts: "Good morning , Sir ." vs "good evening Sir ?" has
    # 3 substitutions and 1 deletion in 5; "a b ." vs "a b c" 1 substitution in 3 -> 5 / 8
    s = summarize([("Good morning, Sir.", "good evening Sir?"), ("a b.", "a b c")])
    assert s["pc_wer"] == approx(62.5)
    assert s["wer_pc"] == approx(62.5)


# ------------------------------------------------------------- aggregation


def test_corpus_rates_pool_errors_then_divide():
    # u0: 10 words, 1 substitution -> 10 %;  u1: 2 words, both wrong -> 100 %.
    # Mean of utterance rates = 55 %; pooled WER = (1+2)/(10+2) = 25 %.
    ref0 = "one two three four five six seven eight nine ten"
    hyp0 = "one two three four five six seven eight nine tin"
    s = summarize([(ref0, hyp0), ("yes no", "maybe so")])
    assert s["counts"]["E_np_nc"] == 3
    assert s["counts"]["N_np_nc"] == 12
    assert s["wer"] == approx(25.0)
    assert s["wer"] != approx((10.0 + 100.0) / 2)


def test_corpus_punc_and_case_er_pool_numerators_and_denominators():
    # u0 "Hello, world." vs "hello world.": punct numerator 1, case numerator 1,
    #   N_p=2, N_c=1 -> per-utterance PuncER 50, CaseER 100
    # u1 "A. B. C. D." vs "A. B. C. D.": 0 errors, N_p=4, N_c=4
    # pooled PuncER = 1/6, CaseER = 1/5 (means would be 25 and 50).
    s = summarize([("Hello, world.", "hello world."), ("A. B. C. D.", "A. B. C. D.")])
    assert s["counts"]["N_p"] == 6
    assert s["counts"]["N_c"] == 5
    assert s["punc_er"] == approx(100 / 6)
    assert s["case_er"] == approx(100 / 5)


# ------------------------------------------------------------- denominators


def test_denominators_are_counted_from_reference():
    # Cased words: I, McDonald, NASA, iPhone, Jean, Paul (hyphen split) = 6;
    # lowercase "met at with an" do not count.  Marks: "," and "." = 2.
    # The hypothesis ("X Y Z?") contributes nothing to the denominators.
    s = summarize(("I met McDonald at NASA with an iPhone, Jean-Paul.", "X Y Z?"))
    assert s["counts"]["N_c"] == 6
    assert s["counts"]["N_p"] == 2
    assert s["counts"]["N_np_nc"] == 10
    assert s["counts"]["N_p_c"] == 12


def test_hypothesis_marks_do_not_change_n_p():
    s = summarize(("hello world.", "hello, world, again?"))
    assert s["counts"]["N_p"] == 1
    assert s["counts"]["N_c"] == 0


def test_no_marks_anywhere_gives_none_not_zero_division():
    s = summarize([("hello world", "hello world"), ("good day", "good night")])
    assert s["counts"]["N_p"] == 0
    assert s["punc_er"] is None
    assert s["per"] is None
    assert s["case_er"] is None
    assert s["wer"] == approx(25.0)  # 1 error / 4 words


# ------------------------------------------------------------- PER breakdown

PER_REF = "one, two. three? four. five, six. seven eight"
PER_HYP = "one. two, three? four five, six? seven, eight"
# Word sequences are identical, so each mark is compared at its word:
#   one   , -> .   S(, -> .)
#   two   . -> ,   S(. -> ,)
#   three ? -> ?   C(?)
#   four  . -> -   D(.)
#   five  , -> ,   C(,)
#   six   . -> ?   S(. -> ?)
#   seven - -> ,   I(,)
# ref marks: . x3, , x2, ? x1 (6); hyp marks: . x1, , x3, ? x2 (6)
# Totals: C=2, S=3, D=6-2-3=1, I=6-2-3=1, PER = (1+1+3)/(1+1+3+2) = 5/7.
# Per mark (C, S, D from the reference mark, I from the hypothesis mark):
#   "." C=0 S=2 D=3-0-2=1 I=1-0-1(,->.)=0 -> den 3: 0, 33.3, 0, 66.7, PER 100
#   "," C=1 S=1 D=2-1-1=0 I=3-1-1(.->,)=1 -> den 3: 33.3, 0, 33.3, 33.3, PER 66.7
#   "?" C=1 S=0 D=0 I=2-1-1(.->?)=0       -> den 1: 100, 0, 0, 0, PER 0


@pytest.fixture
def per_summary():
    return summarize((PER_REF, PER_HYP))


def test_per_totals(per_summary):
    assert per_summary["per_counts"] == dict(C=2, S=3, D=1, I=1, N_ref=6, N_hyp=6)
    assert per_summary["per"] == approx(500 / 7)
    # Cui view on the same pair: words and case all right, E_p_nc = 5 (3 S, 1 D, 1 I)
    assert per_summary["counts"]["E_np_nc"] == 0
    assert per_summary["counts"]["E_p_nc"] == 5
    assert per_summary["punc_er"] == approx(500 / 6)


def test_per_marks_counts(per_summary):
    pm = per_summary["per_marks"]
    assert list(pm) == [".", ",", "?"]  # config order
    assert {k: pm["."][k] for k in "CDIS"} == dict(C=0, D=1, I=0, S=2)
    assert {k: pm[","][k] for k in "CDIS"} == dict(C=1, D=0, I=1, S=1)
    assert {k: pm["?"][k] for k in "CDIS"} == dict(C=1, D=0, I=0, S=0)
    assert pm["."]["S_to"] == {",": 1, "?": 1}
    assert pm[","]["S_to"] == {".": 1}
    assert pm["?"]["S_to"] == {}
    assert (pm["."]["N_ref"], pm["."]["N_hyp"]) == (3, 1)
    assert (pm[","]["N_ref"], pm[","]["N_hyp"]) == (2, 3)
    assert (pm["?"]["N_ref"], pm["?"]["N_hyp"]) == (1, 2)


def test_per_marks_rates(per_summary):
    pm = per_summary["per_marks"]
    third = 100 / 3
    expected = {
        ".": dict(correct=0, deletions=third, insertions=0, substitutions=2 * third, per=100),
        ",": dict(correct=third, deletions=0, insertions=third, substitutions=third, per=2 * third),
        "?": dict(correct=100, deletions=0, insertions=0, substitutions=0, per=0),
    }
    for m, rates in expected.items():
        for k, v in rates.items():
            assert pm[m][k] == approx(v), (m, k)
    assert pm["."]["substitutions_to"] == {",": approx(third), "?": approx(third)}
    assert pm[","]["substitutions_to"] == {".": approx(third)}


def test_per_marks_sum_to_totals_and_rates_to_100(per_summary):
    pm = per_summary["per_marks"]
    pc = per_summary["per_counts"]
    assert sum(d["D"] for d in pm.values()) == pc["D"]
    assert sum(d["I"] for d in pm.values()) == pc["I"]
    assert sum(d["C"] for d in pm.values()) == pc["C"]
    assert sum(d["S"] for d in pm.values()) == pc["S"]
    for m, d in pm.items():
        total = d["correct"] + d["deletions"] + d["insertions"] + d["substitutions"]
        assert total == approx(100.0), m
        assert sum(d["substitutions_to"].values()) == approx(d["substitutions"])


def test_punct_matrix(per_summary):
    # Rows: reference mark or "_" (none: insertions); columns: hypothesis
    # mark or "_" (none: deletions).  Diagonal = Correct.
    assert per_summary["punct_matrix"] == {
        ".": {".": 0, ",": 1, "?": 1, "_": 1},
        ",": {".": 1, ",": 1, "?": 0, "_": 0},
        "?": {".": 0, ",": 0, "?": 1, "_": 0},
        "_": {".": 0, ",": 1, "?": 0, "_": 0},
    }


def test_per_mark_table_layout(per_summary):
    table = per_mark_table(per_summary)
    lines = table.splitlines()
    assert lines[0] == "| Metrics | Period | Comma | Question Mark |"
    labels = [ln.split("|")[1].strip() for ln in lines[2:]]
    for label in (
        "Correct",
        "Deletions",
        "Insertions",
        "Substitutions (total)",
        "Substitutions (to Period)",
        "Substitutions (to Comma)",
        "Substitutions (to Question Mark)",
        "PER",
    ):
        assert label in labels
    rows = {ln.split("|")[1].strip(): [c.strip() for c in ln.split("|")[2:-1]] for ln in lines[2:]}
    assert rows["Correct"] == ["0.00", "33.33", "100.00"]
    assert rows["PER"] == ["100.00", "66.67", "0.00"]
    # Period -> Comma 1/3; Comma -> Comma is not a substitution ("-"); ? -> Comma 0.
    assert rows["Substitutions (to Comma)"] == ["33.33", "-", "0.00"]


def test_per_mark_with_no_occurrences_has_none_rates():
    # Only "." occurs; "," and "?" are kept but never seen -> rates None ("-").
    s = summarize(("a b.", "a b."))
    assert s["per_marks"]["?"]["per"] is None
    assert s["per_marks"][","]["correct"] is None
    row = [ln for ln in per_mark_table(s).splitlines() if ln.startswith("| PER |")][0]
    assert row == "| PER | 0.00 | - | - |"


# ------------------------------------------------------------- properties

_WORDS = ["a", "A", "b", "B", "the", "The", "Bob", "bob", "NASA", "well-known", "Well-Known", "don't"]
_MARKS = [".", ",", "?", "!", ";", ":", "...", "--"]
_structured = st.lists(st.sampled_from(_WORDS + _MARKS), max_size=10).map(" ".join)
texts = _structured | st.text(max_size=20)
corpora = st.lists(st.tuples(texts, texts), min_size=1, max_size=3)


def _score(pairs):
    return score_corpus([(f"u{i}", r, h) for i, (r, h) in enumerate(pairs)])


@settings(max_examples=150, deadline=None, database=None)
@given(st.lists(texts, min_size=1, max_size=3))
def test_identical_ref_and_hyp_have_no_errors(refs):
    s = _score([(r, r) for r in refs]).summary()
    c = s["counts"]
    assert all(c[f"E_{v}"] == 0 for v in ("np_nc", "np_c", "p_nc", "p_c"))
    for key, den in (
        ("wer", "N_np_nc"),
        ("wer_c", "N_np_nc"),
        ("wer_p", "N_p_nc"),
        ("pc_wer", "N_p_c"),
        ("punc_er", "N_p"),
        ("case_er", "N_c"),
    ):
        if c[den]:
            assert s[key] == 0.0, key
        else:
            assert s[key] is None, key
    pc = s["per_counts"]
    assert pc["S"] == pc["D"] == pc["I"] == 0
    assert pc["C"] == c["N_p"]
    assert s["per"] == (0.0 if c["N_p"] else None)


@settings(max_examples=200, deadline=None, database=None)
@given(corpora)
def test_metrics_non_negative_and_ordered(pairs):
    s = _score(pairs).summary()
    c = s["counts"]
    for k in RATE_KEYS:
        assert s[k] is None or s[k] >= 0, k
    # Removing the mark tokens from an optimal P alignment gives an N
    # alignment that costs no more (a mark paired with a word becomes a
    # plain insertion/deletion, mark-mark and mark-eps pairs vanish), so
    # E_np <= E_p.  Lowercasing can only turn substitutions into matches,
    # so E_nc <= E_c.  Hence both Cui numerators are >= 0.
    assert c["E_np_nc"] <= c["E_p_nc"] <= c["E_p_c"]
    assert c["E_np_nc"] <= c["E_np_c"] <= c["E_p_c"]
    assert c["E_p_nc"] - c["E_np_nc"] >= 0
    assert c["E_np_c"] - c["E_np_nc"] >= 0
    # Same denominator N_np_nc: WER <= WER-C; same N_p_nc == N_p_c: WER-P <= PC-WER.
    if s["wer"] is not None:
        assert s["wer"] <= s["wer_c"]
        assert s["wer_p"] <= s["pc_wer"]
    # The N alignment plus every mark deleted/inserted is a P alignment,
    # so the punctuation numerator is at most N_p + (hypothesis marks).
    assert c["E_p_nc"] - c["E_np_nc"] <= c["N_p"] + s["per_counts"]["N_hyp"]


@settings(max_examples=200, deadline=None, database=None)
@given(corpora)
def test_per_counts_consistent(pairs):
    s = _score(pairs).summary()
    pc = s["per_counts"]
    pm = s["per_marks"]
    assert min(pc[k] for k in "CSDI") >= 0
    assert pc["N_ref"] == s["counts"]["N_p"]
    assert pc["D"] == pc["N_ref"] - pc["S"] - pc["C"]
    assert pc["I"] == pc["N_hyp"] - pc["S"] - pc["C"]
    if s["per"] is not None:
        assert 0.0 <= s["per"] <= 100.0
    for k in "CSDI":
        assert sum(d[k] for d in pm.values()) == pc[k]
    for d in pm.values():
        assert min(d[k] for k in "CSDI") >= 0
        if d["per"] is not None:
            total = d["correct"] + d["deletions"] + d["insertions"] + d["substitutions"]
            assert total == approx(100.0)


# ------------------------------------------------------------- zero-WER protocol


def test_zero_wer_prf_hand_example():
    # u0 "Hello world, how are you?" vs "hello world. How are you?" (words right)
    #    Hello/hello: cap FN;  How (hyp only): cap FP
    #    world ,/. : punct FP(.) + FN(,);  you ?/? : punct TP(?)
    # u1 "I am Bob." vs "I am Bob.": cap TP I, Bob (2); punct TP(.)
    # u2 "Good day." vs "good night.": WER > 0 -> excluded from the protocol.
    # cap: TP 2 FP 1 FN 1 -> P = R = F1 = 2/3
    # punct: TP 2 FP 1 FN 1 -> P = R = F1 = 2/3
    # per mark: "." TP1 FP1 FN0 -> P 50 R 100 F1 2*50*100/150 = 66.7
    #           "," TP0 FP0 FN1 -> P undefined, R 0;  "?" all 100
    score = score_corpus(
        [
            ("u0", "Hello world, how are you?", "hello world. How are you?"),
            ("u1", "I am Bob.", "I am Bob."),
            ("u2", "Good day.", "good night."),
        ]
    )
    z = score.zero_wer_prf()
    assert z["num_utts"] == 3
    assert z["num_zero_wer_utts"] == 2
    cap, punc = z["capitalization"], z["punctuation"]
    assert (cap["tp"], cap["fp"], cap["fn"]) == (2, 1, 1)
    assert (punc["tp"], punc["fp"], punc["fn"]) == (2, 1, 1)
    for d in (cap, punc):
        assert d["precision"] == approx(200 / 3)
        assert d["recall"] == approx(200 / 3)
        assert d["f1"] == approx(200 / 3)
    pm = z["punctuation_per_mark"]
    assert (pm["."]["tp"], pm["."]["fp"], pm["."]["fn"]) == (1, 1, 0)
    assert pm["."]["precision"] == approx(50.0)
    assert pm["."]["recall"] == approx(100.0)
    assert pm["."]["f1"] == approx(200 / 3)
    assert pm[","]["recall"] == approx(0.0)
    assert pm[","]["precision"] is None
    assert pm["?"]["f1"] == approx(100.0)
    assert score.summary()["zero_wer_prf"] == z


def test_zero_wer_prf_asymmetric_precision_recall():
    # Same words, so the utterance qualifies: "Paris is in France." vs "Paris Is In France".
    # cap: Paris TP, France TP, Is FP, In FP -> P = 2/4 = 50, R = 2/2 = 100,
    #      F1 = 2*50*100/150 = 66.67
    # punct: ref "." at France, hyp none -> TP0 FP0 FN1: P None, R 0, F1 None
    z = score_corpus([("u0", "Paris is in France.", "Paris Is In France")]).zero_wer_prf()
    cap = z["capitalization"]
    assert (cap["tp"], cap["fp"], cap["fn"]) == (2, 2, 0)
    assert cap["precision"] == approx(50.0)
    assert cap["recall"] == approx(100.0)
    assert cap["f1"] == approx(200 / 3)
    punc = z["punctuation"]
    assert (punc["tp"], punc["fp"], punc["fn"]) == (0, 0, 1)
    assert punc["precision"] is None and punc["f1"] is None
    assert punc["recall"] == approx(0.0)


def test_zero_wer_prf_no_qualifying_utterances():
    z = score_corpus([("u0", "a b", "a c")]).zero_wer_prf()
    assert z["num_zero_wer_utts"] == 0
    assert z["capitalization"]["precision"] is None
    assert z["punctuation"]["f1"] is None


# ------------------------------------------------------------- significance


def test_mapsswe_hand_computed_w():
    # Z = a - b = [1, 2, 3, 0]; mean 1.5;
    # var = ((-.5)^2 + .5^2 + 1.5^2 + (-1.5)^2) / 3 = 5/3
    # W = 1.5 / sqrt((5/3)/4) = 1.5 / sqrt(5/12) = 2.3237900...
    # p = erfc(|W| / sqrt 2) (two-sided normal) ~ 0.0201
    r = mapsswe([2, 3, 4, 1], [1, 1, 1, 1])
    w = 1.5 / math.sqrt(5 / 12)
    assert r["n"] == 4
    assert r["mean_diff"] == approx(1.5)
    assert r["w"] == approx(w)
    assert r["w"] == pytest.approx(2.3237900, abs=1e-6)
    assert r["p_value"] == approx(math.erfc(w / math.sqrt(2)))
    assert r["p_value"] == pytest.approx(0.0201368, abs=1e-6)


def test_mapsswe_sign_and_symmetry():
    a, b = [0, 1, 0, 2, 1], [1, 1, 2, 2, 3]
    r1, r2 = mapsswe(a, b), mapsswe(b, a)
    assert r1["w"] == approx(-r2["w"])
    assert r1["p_value"] == approx(r2["p_value"])
    assert r1["mean_diff"] < 0


def test_mapsswe_identical_and_length_mismatch():
    r = mapsswe([1, 2, 3], [1, 2, 3])
    assert r["w"] is None and r["p_value"] == 1.0
    with pytest.raises(ValueError):
        mapsswe([1, 2], [1, 2, 3])


def test_mapsswe_constant_difference_uses_sign_test():
    # Every segment favours B by one error: W is undefined (zero variance),
    # so the p-value is the two-sided sign test 2 * 0.5**n.
    r = mapsswe([1] * 3, [0] * 3)
    assert r["w"] is None and r["p_value"] == approx(0.25)
    r = mapsswe([1] * 10, [0] * 10)
    assert r["p_value"] == approx(2 * 0.5**10)


REF_WORDS = ["alpha beta gamma delta", "one two three four", "red green blue white"]


def _refs(n):
    return [(f"u{i:02d}", REF_WORDS[i % 3].capitalize() + ".") for i in range(n)]


def test_compare_identical_systems():
    refs = _refs(10)
    hyps = [(u, r, r.lower()) for u, r in refs]
    a, b = score_corpus(hyps), score_corpus(hyps)
    out = compare_systems(a, b)
    assert set(out) == {"wer", "punc_er", "case_er", "pc_wer"}
    for name, r in out.items():
        assert r["p_value"] == 1.0, name
        assert r["better"] == "same", name
        assert r["significant"] is False


def test_compare_clearly_better_system():
    # 30 utterances.  A is perfect.  B drops the last word in 20 of them and
    # also gets one wrong in 5 of those (2 errors), so its per-utterance
    # WER differences vary: Z = A - B in {0, -1, -2}, mean -25/30, p << 0.05.
    refs = _refs(30)
    good, bad = [], []
    for i, (u, r) in enumerate(refs):
        good.append((u, r, r))
        words = r.rstrip(".").split()
        if i < 5:
            h = " ".join(words[:-2] + ["zzz"])
        elif i < 20:
            h = " ".join(words[:-1])
        else:
            h = r
        bad.append((u, r, h))
    a, b = score_corpus(good), score_corpus(bad)
    ab = compare_systems(a, b)
    assert ab["wer"]["p_value"] < 0.05
    assert ab["wer"]["significant"] is True
    assert ab["wer"]["better"] == "A"
    assert ab["wer"]["mean_diff"] == approx(-25 / 30)
    ba = compare_systems(b, a)
    assert ba["wer"]["p_value"] < 0.05
    assert ba["wer"]["better"] == "B"
    # Case is never wrong in either system.
    assert ab["case_er"]["better"] == "same"


def test_compare_order_independent_and_mismatch_raises():
    refs = _refs(4)
    a = score_corpus([(u, r, r) for u, r in refs])
    b = score_corpus([(u, r, "x") for u, r in reversed(refs)])
    out = compare_systems(a, b)
    # Z_i = 0 - (errors of "x" against 4 words = 4) for every utterance.
    assert out["wer"]["mean_diff"] == approx(-4.0)
    c = score_corpus([(u, r, r) for u, r in refs[:3]])
    with pytest.raises(ValueError):
        compare_systems(a, c)
    d = score_corpus([(u + "x", r, r) for u, r in refs])
    with pytest.raises(ValueError):
        compare_systems(a, d)


def _mixed_systems(n=40):
    """A: every word right, a comma inserted in every fourth utterance; B: a word dropped in every
    second utterance, every mark right.  Utterance i of both has the same reference."""
    refs = [(f"u{i:02d}", REF_WORDS[i % 3].capitalize() + " " + REF_WORDS[(i + 1) % 3] + ".") for i in range(n)]
    a = [(u, r, r.replace(" ", ", ", 1) if i % 4 == 0 else r) for i, (u, r) in enumerate(refs)]
    b = [(u, r, r.replace(" ", " ", 1).split(" ", 1)[1] if i % 2 == 0 else r) for i, (u, r) in enumerate(refs)]
    return score_corpus(a), score_corpus(b)


def test_paired_bootstrap_full_set_values_are_the_summary_figures():
    a, b = _mixed_systems()
    out = paired_bootstrap(a, b, resamples=50)
    for fig in ("wer", "pc_wer", "per"):
        assert out[fig]["a"] == approx(a.summary()[fig]), fig
        assert out[fig]["b"] == approx(b.summary()[fig]), fig
        assert out[fig]["resamples"] == 50


def test_paired_bootstrap_finds_each_system_worse_where_it_is():
    a, b = _mixed_systems()
    out = paired_bootstrap(a, b, resamples=500, seed=1)
    # B drops words in half the utterances: worse WER in (almost) every resample
    assert out["wer"]["p_b_worse"] > 0.99 and out["wer"]["p_b_better"] == 0.0
    # A inserts commas, B's marks are all right: B better on PER in (almost) every resample
    assert out["per"]["p_b_better"] > 0.99
    assert out["per"]["p_b_worse"] + out["per"]["p_b_better"] <= 1.0
    # swapping the systems swaps the shares
    back = paired_bootstrap(b, a, resamples=500, seed=1)
    assert back["wer"]["p_b_better"] == out["wer"]["p_b_worse"]
    assert back["per"]["p_b_worse"] == out["per"]["p_b_better"]


def test_paired_bootstrap_identical_systems_and_seed():
    a, _ = _mixed_systems()
    out = paired_bootstrap(a, a, resamples=100)
    assert all(r["p_b_worse"] == 0.0 and r["p_b_better"] == 0.0 for r in out.values())
    x, y = _mixed_systems(60)
    assert paired_bootstrap(x, y, seed=3, resamples=200) == paired_bootstrap(x, y, seed=3, resamples=200)
    # a tie (a word dropped in the other half of the utterances) varies with the draws
    z = score_corpus([(u.utt_id, r, r if i % 2 == 0 else r.split(" ", 1)[1])
                      for i, (u, r) in enumerate((u, "Alpha beta gamma.") for u in y.utts)])
    y2 = score_corpus([(u.utt_id, "Alpha beta gamma.", "beta gamma." if i % 2 == 0 else "Alpha beta gamma.")
                       for i, u in enumerate(y.utts)])
    shares = {paired_bootstrap(y2, z, seed=s, resamples=200)["wer"]["p_b_worse"] for s in range(5)}
    assert len(shares) > 1 and all(0.2 < p < 0.8 for p in shares)


def test_paired_bootstrap_refuses_other_sets_and_figures():
    a, b = _mixed_systems()
    c = score_corpus([(u.utt_id + "x", "a b", "a b") for u in a.utts])
    with pytest.raises(ValueError, match="different utterance sets"):
        paired_bootstrap(a, c)
    with pytest.raises(ValueError, match="no paired bootstrap for 'punc_er'"):
        paired_bootstrap(a, b, figures=["punc_er"])
    with pytest.raises(ValueError, match="at least 1"):
        paired_bootstrap(a, b, resamples=0)


def test_paired_bootstrap_skips_resamples_without_a_denominator():
    # one utterance has marks, the other none: resamples that draw only the second have no PER
    a = score_corpus([("u0", "Yes.", "Yes."), ("u1", "no", "no")])
    out = paired_bootstrap(a, a, figures=["per"], resamples=400, seed=0)
    assert 0 < out["per"]["resamples"] < 400


# ------------------------------------------------------------- markdown


def test_markdown_header_columns_in_order():
    header = markdown_header()
    first, sep = header.splitlines()
    cols = [c.strip() for c in first.strip("|").split("|")]
    assert cols == ["system", "WER", "PuncER", "CaseER", "PC-WER", "PER", "WER-C", "WER-PC"]
    assert sep.count("---") == 8
    assert markdown_header("model").startswith("| model | WER |")
    assert [n for n, _ in TABLE_COLUMNS] == cols[1:]


def test_markdown_row_values_and_none():
    s = summarize(("yes, sir", "yes. sir"))  # case_er None (no cased ref word)
    row = markdown_row("sys1", s)
    cells = [c.strip() for c in row.strip("|").split("|")]
    # WER 0, PuncER 100, CaseER -, PC-WER 33.33, PER 100, WER-C 0, WER-PC 33.33
    assert cells == ["sys1", "0.00", "100.00", "-", "33.33", "100.00", "0.00", "33.33"]
    row2 = markdown_row("sys1", s, {"wer": "*"})
    assert row2.split("|")[2].strip() == "0.00*"


# ------------------------------------------------------------- error file


def test_write_error_file(tmp_path):
    pairs = [
        ("u1", "Hello world.", "hello world"),  # sub Hello->hello, del "."
        ("u2", "a b", "a b c"),  # ins c
        ("u3", "", ""),
    ]
    score = score_corpus(pairs)
    path = tmp_path / "errs.txt"
    write_error_file(str(path), pairs, score)
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines()
    for prefix in ("%WER", "%PC-WER", "%PuncER", "%CaseER", "%PER"):
        assert any(ln.startswith(prefix + " = ") for ln in lines), prefix
    # PC-WER: errors 2 (u1) + 1 (u2) over 3 + 2 reference tokens.
    assert "%PC-WER = 60.00 [ 3 / 5 ]" in lines
    assert "u1:\t(Hello->hello) world (.->*)" in lines
    assert "u2:\ta b (*->c)" in lines
    assert "u3:\t" in lines
    for section in ("SUBSTITUTIONS:", "DELETIONS:", "INSERTIONS:"):
        assert any(ln.startswith(section) for ln in lines), section
    i_sub = next(i for i, ln in enumerate(lines) if ln.startswith("SUBSTITUTIONS"))
    i_del = next(i for i, ln in enumerate(lines) if ln.startswith("DELETIONS"))
    i_ins = next(i for i, ln in enumerate(lines) if ln.startswith("INSERTIONS"))
    assert i_sub < i_del < i_ins
    assert "1   Hello -> hello" in lines[i_sub:i_del]
    assert "1   ." in lines[i_del:i_ins]
    assert "1   c" in lines[i_ins:]
    assert "| Metrics | Period | Comma | Question Mark |" in lines


def test_score_utterance_exposes_numerators():
    u = score_utterance("x", "Good morning, Sir.", "good evening Sir?")
    # From test_mixed_word_case_and_punctuation_errors: 3-1 and 2-1.
    assert u.punct_errors == 2
    assert u.case_errors == 1
    assert u.n_p == 2 and u.n_c == 2


def test_word_errors_flags_the_reference_words_an_alignment_gets_wrong():
    # "the whale rose" -> "the wail rose up": "whale" substituted, "up" inserted
    assert word_errors("the whale rose".split(), "the wail rose up".split()) == ([False, True, False], 1)
    # a deletion flags the word that is missing, not its neighbours
    assert word_errors("call me ishmael".split(), "call ishmael".split()) == ([False, True, False], 0)
    assert word_errors("a b".split(), []) == ([True, True], 0)
    assert word_errors([], "a b".split()) == ([], 2)


@settings(max_examples=200, deadline=None, database=None)
@given(st.lists(st.sampled_from("abcd"), max_size=8), st.lists(st.sampled_from("abcde"), max_size=8))
def test_word_errors_add_up_to_the_edit_distance_wer_counts(ref, hyp):
    wrong, inserted = word_errors(ref, hyp)
    assert len(wrong) == len(ref)
    s = score_utterance("u", " ".join(ref), " ".join(hyp))
    assert sum(wrong) + inserted == s.errors["np_nc"]
    if ref == hyp:
        assert not any(wrong) and inserted == 0
