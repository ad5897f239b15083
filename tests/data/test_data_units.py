"""Fast unit tests of the data-preparation helpers (no TTS, no feature extraction).

Covers local/prepare_synth_text.py (paragraph, abbreviation, sentence and
utterance handling, selection, R data reading), local/make_subsets.py
(encoder frames, ranking), zipformer_pc.data.references, local/synthesize.py
(prosody) and local/tts.py (tool check).
"""

import random
import re
import shutil

import pytest
from conftest import local_module, text_cut

from zipformer_pc.data.references import (
    P_KEY,
    RAW_KEY,
    SYNTH_PUNCT,
    get_n,
    get_p,
    has_p,
    reference_fields,
    withhold_p,
)
from zipformer_pc.text import normalized, punctuated

pst = local_module("prepare_synth_text")
make_subsets = local_module("make_subsets")
tts = local_module("tts")
synthesize = local_module("synthesize")


# --------------------------------------------------------------------------- is_prose


@pytest.mark.parametrize(
    "line",
    [
        "CHAPTER IV",
        "VOLUME II",
        "By Jane Austen",
        "(1814)",
        "PRIDE AND PREJUDICE",
        "THE END OF THE FIRST VOLUME OF THIS NOVEL",  # all caps, many words
        "Chapter 1",
        "CHAPTER 12. The Carpet-Bag.",  # heading even with a final period
        "Persuasion",
        "Etymology",
    ],
)
def test_is_prose_drops_headings_and_title_lines(line):
    assert pst.is_prose(line) is False


@pytest.mark.parametrize(
    "line",
    [
        "It is a truth universally acknowledged, that a single man in possession of a good fortune",
        "She was very happy to see him again.",
        "Very well.",  # short, but a sentence
        "\"Is it?\"",
        "Emma Woodhouse, handsome, clever, and rich, with a comfortable home",
    ],
)
def test_is_prose_keeps_ordinary_prose(line):
    assert pst.is_prose(line) is True


def test_paragraphs_skip_title_page_and_join_lines():
    lines = ["PRIDE AND PREJUDICE", "", "By Jane Austen", "", "", "Chapter 1", "",
             "It is a truth universally acknowledged, that a single man in possession",
             "of a good fortune, must be in want of a wife.", "", "THE END"]
    assert list(pst.paragraphs(lines)) == [
        "It is a truth universally acknowledged, that a single man in possession "
        "of a good fortune, must be in want of a wife."
    ]


# --------------------------------------------------------------- expand_abbreviations


@pytest.mark.parametrize(
    "raw, expanded",
    [
        ("Mr. Darcy", "Mister Darcy"),
        ("Mrs. Bennet", "Missus Bennet"),
        ("Mrs. Bennet and Mr. Bingley came.", "Missus Bennet and Mister Bingley came."),
        ("Dr. Grant", "Doctor Grant"),
        ("Col. Brandon and Capt. Wentworth", "Colonel Brandon and Captain Wentworth"),
        ("St. Ives", "Saint Ives"),
        # the abbreviation's period stays: it may also end the sentence
        ("ribbons, lace, &c. were bought", "ribbons, lace, et cetera. were bought"),
        ("&c. &c.", "et cetera. et cetera."),
        ("ribbons, lace, &c. She went home.", "ribbons, lace, et cetera. She went home."),
        ("Mr.", "Mister"),  # at the end of the text
        # British titles without their period (Persuasion's "Mr Elliot"), which the voices read in full
        ("you sometimes spoke of me to Mr Elliot?", "you sometimes spoke of me to Mister Elliot?"),
        ("Mrs Smith and Dr Shirley", "Missus Smith and Doctor Shirley"),
        ("Mr and Mrs Musgrove", "Mister and Missus Musgrove"),
    ],
)
def test_expand_abbreviations(raw, expanded):
    assert pst.expand_abbreviations(raw) == expanded


def test_expand_abbreviations_leaves_other_words_alone():
    text = "Mrs.Smith wrote to Mister Darcy. Dry words; Drs. and Strs. Mr smith, Esq Brown, Dr, Mrs andante"
    # no space after the period, an already spelt-out title, words merely starting like an abbreviation,
    # a period-less title not before a capitalised name, "Esq" (it follows the name)
    assert pst.expand_abbreviations(text) == text


# -------------------------------------------------------------------- split_sentences


def test_split_sentences_at_terminal_marks_before_capitals():
    assert pst.split_sentences("He came. She left! Why? Because.") == ["He came.", "She left!", "Why?", "Because."]


def test_split_sentences_keeps_closing_quotes_and_splits_before_opening_quotes():
    assert pst.split_sentences('"Is it?" "Yes." He left.') == ['"Is it?"', '"Yes."', "He left."]
    assert pst.split_sentences("\"Go!\" said he. (Then) she left! _Emma_ was read.") == [
        '"Go!" said he.',
        "(Then) she left!",
        "_Emma_ was read.",
    ]


def test_split_sentences_does_not_split_before_lowercase():
    assert pst.split_sentences('"Go!" said he, "and so on." and she went.') == [
        '"Go!" said he, "and so on." and she went.'
    ]


def test_split_sentences_after_expansion_keeps_titles_with_names():
    para = "Mr. Darcy came in. Mrs. Bennet said nothing."
    assert pst.split_sentences(para)[0] == "Mr."  # why expansion must come first
    assert pst.split_sentences(pst.expand_abbreviations(para)) == [
        "Mister Darcy came in.",
        "Missus Bennet said nothing.",
    ]


def test_split_sentences_keeps_an_unterminated_tail():
    assert pst.split_sentences("He came. and then") == ["He came. and then"]
    assert pst.split_sentences("He came. Then") == ["He came.", "Then"]


# ---------------------------------------------------------------------- keep_sentence


@pytest.mark.parametrize(
    "sent",
    [
        "He said yes.",
        "I think I can.",
        '"Go away now!"',
        "_Emma_ was here.",
        '"Well," said she, "it is (so)."',
        "Is it so?",
        " ".join(["word"] * 44) + " end.",  # exactly 45 words
    ],
)
def test_keep_sentence_accepts(sent):
    assert pst.keep_sentence(sent) is True


@pytest.mark.parametrize(
    "sent, why",
    [
        ("Yes sir.", "too short"),
        (" ".join(["word"] * 45) + " end.", "46 words: too long"),
        ("It was in 1814.", "digit"),
        ("He wrote NO to them.", "all-caps word"),
        ("He read the _LETTER_ again.", "all-caps word in italics"),
        ("He went away, and", "no sentence end"),
        ("He went away,", "comma end"),
        ("He went away;", "semicolon end"),
    ],
)
def test_keep_sentence_rejects(sent, why):
    assert pst.keep_sentence(sent) is False, why


def test_keep_sentence_word_limits_are_parameters():
    assert pst.keep_sentence("Yes sir.", min_words=2) is True
    assert pst.keep_sentence("One two three four five.", max_words=4) is False


# ------------------------------------------------------------------ group_utterances


def _runs():
    return [
        ("bookA", 0, ["One two three four five.", "Six seven eight?", "Nine ten eleven twelve.",
                      " ".join(["long"] * 41) + ".", "Short one here."]),
        ("bookA", 1, ["Hi there you.", "Ok."]),
        ("bookA", 1, ["Later in the same paragraph.", "After a gap."]),  # same paragraph, new run
        ("bookB", 0, ["Yes it is so.", "No it is not so.", "Maybe it is so.", "Or maybe it is not.",
                      "And this is one more.", "And another one too."]),
        ("bookB", 2, ["Tiny.", "Also tiny.", "Small.", "Wee."]),  # 1+2+1+1 words
    ]


def _sentence_spans(utt, runs):
    """Indices of the runs whose consecutive sentences join to the utterance text."""
    hits = []
    for ri, (book, pi, sents) in enumerate(runs):
        if (book, pi) != (utt["source"], utt["paragraph"]):
            continue
        for i in range(len(sents)):
            for j in range(i + 1, min(i + 3, len(sents)) + 1):
                if " ".join(sents[i:j]) == utt["text_raw"] and j - i == utt["num_sentences"]:
                    hits.append(ri)
    return hits


@pytest.mark.parametrize("seed", range(30))
def test_group_utterances_limits_and_runs(seed):
    runs = _runs()
    utts = pst.group_utterances(runs, random.Random(seed))
    assert utts
    for u in utts:
        assert 1 <= u["num_sentences"] <= 3
        assert 4 <= u["num_words"] <= 40
        assert u["num_words"] == len(normalized(u["text_raw"]).split())
        assert _sentence_spans(u, runs), f"{u['text_raw']!r} is not consecutive sentences of one run"
        assert u["has_question"] == ("?" in u["text_raw"])
        assert u["tts_text"] == punctuated(u["text_raw"], pst.TTS_PUNCT)
    texts = [u["text_raw"] for u in utts]
    assert not any("long long" in t for t in texts)  # 41-word sentence exceeds the limit
    # "Ok." ends run 2 and "Later in ..." starts run 3: they are never joined
    assert not any("Ok. Later" in t for t in texts)
    # bookB/2 has 5 words in 4 sentences: no group of at most 3 reaches 4 words but the first three
    assert all(u["num_sentences"] == 3 for u in utts if u["source"] == "bookB" and u["paragraph"] == 2)


def test_group_utterances_custom_word_limits():
    utts = pst.group_utterances(_runs(), random.Random(0), min_words=6, max_words=9)
    assert utts
    assert all(6 <= u["num_words"] <= 9 for u in utts)


def test_group_utterances_is_deterministic_for_a_seed():
    a = pst.group_utterances(_runs(), random.Random(5))
    b = pst.group_utterances(_runs(), random.Random(5))
    assert a == b
    # different seeds give different groupings for at least one seed pair
    groupings = {tuple(u["text_raw"] for u in pst.group_utterances(_runs(), random.Random(s))) for s in range(20)}
    assert len(groupings) > 1


# ----------------------------------------------------------------------------- select


def _pool(n=100, q_every=5, words=10):
    return [{"id": i, "num_words": words, "has_question": i % q_every == 0} for i in range(n)]


def test_select_questions_first_up_to_the_cap():
    utts = _pool()  # 20 questions of 10 words, 80 others
    chosen, left = pst.select(utts, random.Random(0), budget_words=200, max_q_frac=0.4)
    q_words = sum(u["num_words"] for u in chosen if u["has_question"])
    assert q_words == 80  # as many questions as fit in 0.4 * 200 words (a random pick would hold ~40)
    assert sum(u["num_words"] for u in chosen) == 200


def test_select_takes_every_question_when_the_cap_allows():
    chosen, _ = pst.select(_pool(), random.Random(0), budget_words=1000, max_q_frac=0.4)
    assert sum(u["has_question"] for u in chosen) == 20


def test_select_honours_the_budget_and_partitions():
    utts = [{"id": i, "num_words": 4 + (i * 7) % 30, "has_question": i % 9 == 0} for i in range(300)]
    max_words = max(u["num_words"] for u in utts)
    for budget in (50, 333, 1000, 2500):
        chosen, left = pst.select(utts, random.Random(budget), budget_words=budget, max_q_frac=0.3)
        total = sum(u["num_words"] for u in chosen)
        assert budget <= total < budget + max_words  # stops at the first utterance reaching the budget
        assert sum(u["num_words"] for u in chosen if u["has_question"]) <= 0.3 * budget
        ids = [u["id"] for u in chosen] + [u["id"] for u in left]
        assert sorted(ids) == list(range(300))  # chosen and left partition the pool


def test_select_small_pool_takes_everything():
    chosen, left = pst.select(_pool(10), random.Random(0), budget_words=10_000, max_q_frac=1.0)
    assert len(chosen) == 10 and left == []


def test_select_is_deterministic_for_a_seed():
    a = pst.select(_pool(), random.Random(3), 300, 0.4)
    b = pst.select(_pool(), random.Random(3), 300, 0.4)
    c = pst.select(_pool(), random.Random(4), 300, 0.4)
    assert a == b
    assert [u["id"] for u in a[0]] != [u["id"] for u in c[0]]


def test_add_readings_appends_copies_of_the_questions_only():
    utts = [{"text_raw": f"u{i}", "has_question": i % 3 == 0} for i in range(7)]  # questions 0, 3, 6
    out = pst.add_readings(utts, 3)
    assert out[:7] == utts  # the first readings keep their place, hence their ids
    extra = out[7:]
    assert [u["text_raw"] for u in extra] == ["u0", "u3", "u6"] * 2
    assert [u["reading"] for u in extra] == [2, 2, 2, 3, 3, 3]
    assert [u["first_reading"] for u in extra] == ["train-000000", "train-000003", "train-000006"] * 2
    assert pst.add_readings(utts, 1) == utts


def test_synthesize_draws_other_voices_for_other_ids():
    voices = tts.TRAIN_VOICES
    drawn = {synthesize.prosody(f"train-{i:06d}", voices, 42)["voice"]["name"] for i in range(200)}
    assert len(drawn) == len(voices)  # readings of one text under new ids get voices of their own
    assert synthesize.prosody("train-000007", voices, 42) == synthesize.prosody("train-000007", voices, 42)


# ----------------------------------------------------------------------- R data files


def test_read_rdata_lazyload_returns_the_six_austen_books():
    data = pst.read_rdata_lazyload(pst.AUSTEN_RDATA)
    assert set(data) == set(pst.AUSTEN_BOOKS)
    pp = [str(x) for x in data["prideprejudice"]]
    assert len(pp) > 10_000
    assert "It is a truth universally acknowledged, that a single man in possession" in pp
    for book in pst.AUSTEN_BOOKS:
        assert len(data[book]) > 5000


def test_read_rdata_lazyload_missing_file():
    with pytest.raises(FileNotFoundError, match="nowhere/Rdata.rdx"):
        pst.read_rdata_lazyload("/nowhere/Rdata")


# ----------------------------------------------------------------------- make_subsets


@pytest.mark.parametrize("frames, expected", [(7, 0), (8, 0), (9, 1), (10, 1), (100, 23), (1000, 248), (1055, 262)])
def test_encoder_frames(frames, expected):
    assert make_subsets.encoder_frames(frames) == expected


def test_encoder_frames_is_about_a_quarter():
    for t in range(20, 3000, 37):
        assert abs(make_subsets.encoder_frames(t) - t / 4) <= 2.5


def test_rank_key_is_deterministic_and_seeded():
    k = make_subsets.rank_key(42, "train-000001")
    assert k == make_subsets.rank_key(42, "train-000001")
    assert isinstance(k, bytes) and len(k) == 32
    assert k != make_subsets.rank_key(43, "train-000001")
    assert k != make_subsets.rank_key(42, "train-000002")
    ids = [f"train-{i:06d}" for i in range(200)]
    r1 = sorted(ids, key=lambda i: make_subsets.rank_key(7, i))
    assert r1 == sorted(ids, key=lambda i: make_subsets.rank_key(7, i))
    assert r1 != sorted(ids, key=lambda i: make_subsets.rank_key(8, i))
    assert r1 != ids


@pytest.mark.parametrize("f, name", [(1.0, "p1"), (0.5, "p0.5"), (0.35, "p0.35"), (0.05, "p0.05"), (0.0, "p0")])
def test_subset_name(f, name):
    assert make_subsets.subset_name(f) == name


# ------------------------------------------------------------------------- references


def _cut(custom, text="well said he"):
    return text_cut("u1", text, custom)


def test_reference_fields_from_p_only():
    raw = '"Well!" said Mr. Bennet; "is it?"'
    f = reference_fields(raw, config=SYNTH_PUNCT)
    assert f["text"] == "well said mr bennet is it"
    assert f["custom"] == {P_KEY: "Well. said Mr. Bennet is it?", RAW_KEY: raw}
    assert f["text"] == normalized(f["custom"][P_KEY])


def test_reference_fields_with_separate_n():
    f = reference_fields("Mr. Bennet said so.", "MISTER BENNET SAID SO")
    assert f["text"] == "mister bennet said so"
    assert f["custom"][P_KEY] == "Mr. Bennet said so."
    assert f["custom"][RAW_KEY] == "Mr. Bennet said so."


def test_reference_fields_n_only_and_neither():
    assert reference_fields(None, "MISTER BENNET") == {"text": "mister bennet", "custom": {}}
    with pytest.raises(ValueError):
        reference_fields(None, None)
    with pytest.raises(ValueError):
        reference_fields(None)


def test_reference_fields_without_words_has_no_p():
    assert reference_fields('"..."') == {"text": "", "custom": {}}


def test_get_p_has_p_and_auto():
    c = _cut({P_KEY: "Well, said he.", RAW_KEY: '"Well," said he.', "text_p_auto": "Well said he."})
    sup = c.supervisions[0]
    assert get_p(sup) == "Well, said he."
    assert get_p(sup, use_auto_punct=True) == "Well said he."
    assert get_n(sup) == "well said he"
    assert has_p(c)
    assert not has_p(_cut(None))
    assert get_p(_cut(None).supervisions[0]) is None
    assert not has_p(_cut({"source": "emma"}))
    from lhotse.cut import MonoCut

    assert not has_p(MonoCut(id="e", start=0.0, duration=1.0, channel=0, supervisions=[]))


def test_withhold_p_copies():
    c = _cut({P_KEY: "Well, said he.", RAW_KEY: '"Well," said he.', "source": "emma", "tts": {"rate": 1}})
    w = withhold_p(c)
    assert not has_p(w)
    assert P_KEY not in w.supervisions[0].custom and RAW_KEY not in w.supervisions[0].custom
    assert w.supervisions[0].custom == {"source": "emma", "tts": {"rate": 1}}
    assert get_n(w.supervisions[0]) == "well said he"
    assert w.id == c.id and w.duration == c.duration
    # the original is untouched
    assert c.supervisions[0].custom[P_KEY] == "Well, said he."
    assert c.supervisions[0].custom[RAW_KEY] == '"Well," said he.'
    assert has_p(c)
    # a cut without custom stays valid
    assert get_n(withhold_p(_cut(None)).supervisions[0]) == "well said he"


# --------------------------------------------------------------------- synth prosody


@pytest.mark.parametrize("pool_name", ["TRAIN_VOICES", "OOD_VOICES"])
def test_prosody_is_a_function_of_seed_and_id_within_ranges(pool_name):
    pool = getattr(tts, pool_name)
    by_name = {v.name: v for v in pool}
    used = set()
    for i in range(300):
        uid = f"train-{i:06d}"
        p = synthesize.prosody(uid, pool, 42)
        assert p == synthesize.prosody(uid, pool, 42)
        v = by_name[p["voice"]["name"]]
        assert p["voice"] == tts.voice_dict(v)
        used.add(v.name)
        assert -80 <= p["sox_pitch_cents"] <= 80
        assert 0.92 <= p["sox_tempo"] <= 1.08
        if v.engine == "espeak-ng":
            assert round(v.rate * 0.9) <= p["rate"] <= round(v.rate * 1.1)
            assert max(0, v.pitch - 10) <= p["pitch"] <= min(99, v.pitch + 10)
        else:
            assert p["rate"] == 0 and p["pitch"] == 0
    assert used == set(by_name)  # 300 draws reach every voice of the pool


def test_prosody_depends_on_seed_and_id_only():
    pool = tts.TRAIN_VOICES
    a = [synthesize.prosody(f"u{i}", pool, 1) for i in range(50)]
    b = [synthesize.prosody(f"u{i}", pool, 2) for i in range(50)]
    assert a != b
    assert synthesize.prosody("u1", pool, 1) != synthesize.prosody("u2", pool, 1) or \
        synthesize.prosody("u3", pool, 1) != synthesize.prosody("u4", pool, 1)
    # unaffected by the global random state
    random.seed(0)
    x = synthesize.prosody("u7", pool, 1)
    random.seed(12345)
    assert synthesize.prosody("u7", pool, 1) == x


def test_voice_pools_are_disjoint_and_known():
    train = {v.name for v in tts.TRAIN_VOICES}
    ood = {v.name for v in tts.OOD_VOICES}
    assert not train & ood
    for v in tts.TRAIN_VOICES + tts.OOD_VOICES:
        assert v.engine in tts.APT_PACKAGE
        assert tts.voice_by_name(v.name) == v
    assert tts.voice_by_name("nobody") is None


# ------------------------------------------------------------------------ check_tools


def _which_without(*missing):
    return lambda tool: None if tool in missing else f"/usr/bin/{tool}"


def test_check_tools_passes_when_everything_is_there(monkeypatch):
    monkeypatch.setattr(tts.shutil, "which", _which_without())
    tts.check_tools(tts.TRAIN_VOICES + tts.OOD_VOICES)


@pytest.mark.parametrize(
    "missing, voices, package",
    [
        ("flite", "TRAIN_VOICES", "flite"),
        ("espeak-ng", "OOD_VOICES", "espeak-ng"),
        ("festival", "TRAIN_VOICES", "festvox-kallpc16k"),
        ("sox", "OOD_VOICES", "sox"),
    ],
)
def test_check_tools_names_the_apt_package(monkeypatch, missing, voices, package):
    monkeypatch.setattr(tts.shutil, "which", _which_without(missing))
    with pytest.raises(SystemExit) as e:
        tts.check_tools(getattr(tts, voices))
    msg = str(e.value)
    assert missing in msg
    assert re.search(r"apt-get install -y .*\b" + re.escape(package) + r"\b", msg)


def test_check_tools_only_needs_the_engines_of_the_voices(monkeypatch):
    monkeypatch.setattr(tts.shutil, "which", _which_without("festival", "espeak-ng"))
    flite_only = [v for v in tts.TRAIN_VOICES if v.engine == "flite"]
    tts.check_tools(flite_only)  # festival and espeak-ng are not needed
    with pytest.raises(SystemExit) as e:
        tts.check_tools(tts.TRAIN_VOICES)
    assert "espeak-ng" in str(e.value) and "festival" in str(e.value)


# --------------------------------------------------------------------------- repeatable audio

@pytest.mark.skipif(not (shutil.which("espeak-ng") and shutil.which("sox")), reason="needs espeak-ng and sox")
def test_rendering_twice_gives_identical_samples(tmp_path):
    """sox dithers when it writes 16-bit audio; without -R its noise differed on
    every run (45% of samples off by an LSB), so the same --seed gave different
    corpora and different trained models."""
    import soundfile as sf

    voice = next(v for v in tts.TRAIN_VOICES if v.engine == "espeak-ng")
    synth = tts.Synthesizer()
    try:
        for name in ("a.flac", "b.flac"):
            synth.render(voice, "Have you not seen this?", str(tmp_path / name), sox_pitch_cents=40, sox_tempo=0.95)
    finally:
        synth.close()
    a, sr_a = sf.read(tmp_path / "a.flac", dtype="int16")
    b, sr_b = sf.read(tmp_path / "b.flac", dtype="int16")
    assert sr_a == sr_b == 16000 and len(a) > 8000
    assert (a == b).all()


# ----------------------------------------------------------- training loader order (SortaGrad)


def _duration_manifest(path, durations):
    """A cut manifest of feature-less cuts with these durations (the samplers only read durations)."""
    from lhotse import CutSet, MonoCut, Recording

    cuts = []
    for i, d in enumerate(durations):
        rec = Recording(id=f"r{i}", sources=[], sampling_rate=16000, num_samples=int(d * 16000), duration=d)
        cuts.append(MonoCut(id=f"c{i:03d}", start=0.0, duration=d, channel=0, recording=rec))
    CutSet.from_cuts(cuts).to_file(path)
    return path


def _loader_order(path, max_duration=12.0, **kwargs):
    from zipformer_pc.data.datamodule import PCAsrDataModule

    loader = PCAsrDataModule(tokenizer=None, max_duration=max_duration, seed=3).train_dataloader(str(path), **kwargs)
    return [[c.id for c in batch] for batch in loader.sampler], {c.id: c.duration for batch in loader.sampler
                                                                   for c in batch}


def test_sort_by_duration_reads_every_cut_once_shortest_first(tmp_path):
    durs = [round(random.Random(i).uniform(0.5, 9.0), 2) for i in range(40)] + [4.0, 4.0]  # a tie, broken by id
    path = _duration_manifest(tmp_path / "cuts.jsonl.gz", durs)
    batches, dur = _loader_order(path, sort_by_duration=True)
    order = [c for b in batches for c in b]
    assert sorted(order) == sorted(f"c{i:03d}" for i in range(len(durs)))  # every cut, once
    keys = [(dur[c], c) for c in order]
    assert keys == sorted(keys)
    assert len(batches[0]) > len(batches[-1])  # short cuts pack many to a batch
    # the same order every time; the shuffled loader's differs
    assert _loader_order(path, sort_by_duration=True)[0] == batches
    shuffled = [c for b in _loader_order(path, num_buckets=1)[0] for c in b]
    assert sorted(shuffled) == sorted(order) and shuffled != order


def test_sort_fraction_reads_the_shortest_share_of_the_audio(tmp_path):
    durs = [float(d) for d in range(1, 11)]  # 55 s in all
    path = _duration_manifest(tmp_path / "cuts.jsonl.gz", durs)
    batches, dur = _loader_order(path, sort_by_duration=True, sort_fraction=0.3)
    order = [c for b in batches for c in b]
    # 1 + 2 + 3 + 4 + 5 = 15 s < 16.5 s (30%), the 6 s cut crosses it: six cuts, shortest first
    assert order == [f"c{i:03d}" for i in range(6)]
    assert _loader_order(path, sort_by_duration=True, sort_fraction=1e-6)[0] == [["c000"]]  # at least one
    # the shuffled epochs read them all
    assert len([c for b in _loader_order(path, num_buckets=1, sort_fraction=0.3)[0] for c in b]) == 10


def test_gcide_blocks_become_prose_or_nothing():
    # sense number, field label, note in brackets, citation after "--"
    assert pst.gcide_block(["   3. (Astron.) That phase of the moon in which it appears",
                            "      bisected, as at the quadratures. [R.] --Whewell."]) == \
        "That phase of the moon in which it appears bisected, as at the quadratures."
    # a quotation; cross-reference braces keep their word; removed markup leaves no space before a mark
    assert pst.gcide_block(["            A stouter champion never handled {sword} .   --Shak."]) == \
        "A stouter champion never handled sword."
    # Greek letters print as "?": no made-up questions
    assert pst.gcide_block(["   From Gr. ? in two, asunder."]) == ""
    assert pst.gcide_block(["   And what can heaven show more?"]) == "And what can heaven show more?"
    # dictionary shorthand, spaced ellipses, other markup, lower-case fragments: dropped
    for lines in (["   Same as Dichroscope; esp. of a crystal."], ["   A river . . . apt to be forded."],
                  ["   Syn: Earnest, Pledge."], ["   The sign <ae> of a vowel."], ["   was dichotomized."]):
        assert pst.gcide_block(lines) == "", lines


def test_load_gcide_skips_entry_heads(tmp_path):
    import gzip

    path = tmp_path / "gcide.dict.dz"
    with gzip.open(path, "wt") as f:
        f.write("Abdicator \\Ab\"di*ca`tor\\, n.\n   One who abdicates.\n   [1913 Webster]\n\n"
                "Dichotomy \\Di*chot\"o*my\\, n. [Gr. ?.]\n   1. A cutting in two; a division.\n      [1913 Webster]\n\n"
                "            A general breach with their church.\n                       --Sir T.\n"
                "                       Browne.\n      [1913 Webster]\n")
    # the head block (headword, pronunciation, etymology, a single sense) is skipped
    assert pst.load_gcide(str(path)) == {"gcide": ["A general breach with their church.", ""]}
    with pytest.raises(SystemExit, match="dict-gcide"):
        pst.load_gcide(str(tmp_path / "missing.dz"))
