"""Token n-gram LMs (zipformer_pc.lm): Kneser-Ney training, pruning, ARPA files,
the id-based scores beam search fuses, and local/train_lm.py."""

import gzip
import math
import time

import pytest

from zipformer_pc.lm import ARPA_DECIMALS, BOS, EOS, LOG10, NgramLm

TEXT = [
    "the cat sat on the mat".split(),
    "the dog sat on the log".split(),
    "a cat and a dog sat".split(),
    "san francisco is far".split(),
    "i saw san francisco".split(),
    "san francisco san francisco".split(),
    "the cat saw the dog".split(),
    "my cat is on the mat".split(),
]
VOCAB = sorted({w for s in TEXT for w in s} | {"zebra"})  # "zebra": never in the text


def _sum_after(lm: NgramLm, ctx) -> float:
    return sum(math.exp(lm.logp(ctx, w)) for w in VOCAB + [EOS])


@pytest.mark.parametrize("prune", [(), (0, 0, 1)], ids=["full", "pruned"])
def test_every_context_is_a_distribution(prune):
    lm = NgramLm.train(TEXT, 3, vocab=VOCAB, prune=prune)
    contexts = [(BOS,), (BOS, "the"), ("the", "cat"), ("san", "francisco"), ("on", "the"), ("zebra", "sat"), ()]
    for ctx in contexts:
        assert _sum_after(lm, ctx) == pytest.approx(1.0, abs=1e-6), ctx
    assert lm.logp(("the",), "zebra") > -30  # a vocabulary piece never seen is unlikely, not impossible


def test_kneser_ney_backs_off_to_how_many_contexts_a_word_follows():
    """'francisco' is as frequent as 'cat' but only ever follows 'san': after an
    unseen context it must be the less likely one (the point of Kneser-Ney)."""
    lm = NgramLm.train(TEXT, 2, vocab=VOCAB)
    count = {w: sum(s.count(w) for s in TEXT) for w in ("cat", "francisco")}
    assert count["cat"] == count["francisco"]
    assert lm.logp(("zebra",), "francisco") < lm.logp(("zebra",), "cat")
    assert lm.logp(("san",), "francisco") > math.log(0.5)
    # a longer context that was seen sharpens the prediction
    assert lm.logp(("on", "the"), "mat") > lm.logp((), "mat")


def test_pruning_drops_rare_long_ngrams_but_keeps_the_contexts_of_kept_ones():
    full = NgramLm.train(TEXT, 3, vocab=VOCAB)
    pruned = NgramLm.train(TEXT, 3, vocab=VOCAB, prune=(0, 0, 1))
    assert pruned.counts()[:2] == full.counts()[:2]
    assert 0 < pruned.counts()[2] < full.counts()[2]
    for g in pruned.probs:
        if len(g) == 3:
            assert g[:2] in pruned.probs, g  # ARPA needs the context as an n-gram
    assert ("the", "cat", "sat") not in pruned.probs  # seen once
    assert ("sat", "on", "the") in pruned.probs  # seen twice
    with pytest.raises(ValueError, match="prune"):
        NgramLm.train(TEXT, 2, prune=(0, 0, 1))


def test_arpa_round_trip_and_bad_files(tmp_path):
    lm = NgramLm.train(TEXT, 3, vocab=VOCAB, prune=(0, 0, 1))
    for name in ("lm.arpa", "lm.arpa.gz"):
        lm.write_arpa(tmp_path / name)
        back = NgramLm.read_arpa(tmp_path / name)
        assert back.order == 3 and back.counts() == lm.counts()
        # ARPA_DECIMALS (4) decimals of log10: each figure within half a unit of the last one
        tol = 0.5 * 10 ** -ARPA_DECIMALS * LOG10 + 1e-12
        assert set(back.backoffs) == set(lm.backoffs)
        for g, p in lm.probs.items():
            assert back.probs[g] == pytest.approx(p, abs=tol)
        for g, b in lm.backoffs.items():
            assert back.backoffs[g] == pytest.approx(b, abs=tol)
    with gzip.open(tmp_path / "lm.arpa.gz", "rt") as f:
        head = f.read(200)
    assert head.lstrip().startswith("\\data\\") and "ngram 3=" in head
    # the same LM written again (a second later) gives the same bytes: no time stamp in the gzip header
    first = (tmp_path / "lm.arpa.gz").read_bytes()
    time.sleep(1.1)
    lm.write_arpa(tmp_path / "lm.arpa.gz")
    assert (tmp_path / "lm.arpa.gz").read_bytes() == first
    text = (tmp_path / "lm.arpa").read_text()
    (tmp_path / "short.arpa").write_text(text.replace("ngram 1=", "ngram 1=1", 1))
    with pytest.raises(ValueError, match="declares"):
        NgramLm.read_arpa(tmp_path / "short.arpa")
    (tmp_path / "not.arpa").write_text("hello world\n")
    with pytest.raises(ValueError, match="ARPA"):
        NgramLm.read_arpa(tmp_path / "not.arpa")


def test_bound_scores_equal_the_models_probabilities_for_every_token():
    lm = NgramLm.train(TEXT, 3, vocab=VOCAB, prune=(0, 0, 1))
    tokens = ["<blk>"] + VOCAB + ["<unk>"]
    bound = lm.bind(tokens)
    ids = {t: i for i, t in enumerate(tokens)}
    for words in ([], ["the"], ["on", "the"], ["san"], ["zebra", "zebra"], ["a", "cat", "and"]):
        state = bound.state_after([ids[w] for w in words])
        ctx = ([BOS] + words)[-2:]
        got = bound.scores(state)
        for w in VOCAB:
            assert got[ids[w]] == pytest.approx(lm.logp(ctx, w), abs=1e-9), (words, w)
        assert got[ids["<blk>"]] < -100 and got[ids["<unk>"]] < -100
        assert bound.scores(state) is got  # cached per state
    assert bound.next_state(bound.state_after([ids["the"]]), ids["cat"]) == (ids["the"], ids["cat"])
    with pytest.raises(ValueError, match="tokenizer"):
        lm.bind(["<blk>", "the"])


def test_lodr_subtracts_the_low_order_lm_from_what_fusion_adds():
    """LodrLm's fusion is the LM's less lodr_scale times the bigram's log probability of each token
    after the state's last token (<s> at the start); blank and <unk> stay at 0; the states are the LM's."""
    from zipformer_pc.lm import LodrLm, fusion_defaults

    tokens = ["<blk>"] + VOCAB + ["<unk>"]
    ids = {t: i for i, t in enumerate(tokens)}
    lm = NgramLm.train(TEXT, 3, vocab=VOCAB).bind(tokens)
    low = NgramLm.train(TEXT[:4], 2, vocab=VOCAB).bind(tokens)
    lodr = lm.with_lodr(low, 0.3)
    states = [lm.state_after([]), lm.state_after([ids["the"]]), lm.state_after([ids["on"], ids["the"], ids["cat"]])]
    got = lodr.fusion(states, 0.6, 0.5, skip=(0, ids["<unk>"]))
    plain = lm.fusion(states, 0.6, 0.5, skip=(0, ids["<unk>"]))
    for row, words in zip(range(3), ([BOS], ["the"], ["cat"])):
        ctx = [words[-1]]
        for w in ("the", "cat", "zebra", "sat"):
            bigram = low.scores((ids.get(ctx[0], -1),))[ids[w]]
            assert got[row, ids[w]] == pytest.approx(plain[row, ids[w]] - 0.3 * bigram, abs=1e-12), (words, w)
        assert got[row, 0] == got[row, ids["<unk>"]] == 0.0
    assert (got > plain)[:, 1:-1].all()  # a log probability below 0, subtracted: every token gains
    assert (lm.with_lodr(low, 0.0).fusion(states, 0.6, 0.5) == lm.fusion(states, 0.6, 0.5)).all()
    # the LM itself as its own low-order LM at the same weight leaves the bonus only
    bigram = NgramLm.train(TEXT, 2, vocab=VOCAB).bind(tokens)
    assert bigram.with_lodr(bigram, 0.6).fusion(states, 0.6, 0.5)[:, 1:-1] == pytest.approx(0.5)
    assert lodr.state_after([ids["a"], ids["cat"]]) == lm.state_after([ids["a"], ids["cat"]])
    assert lodr.next_state((ids["a"], ids["cat"]), ids["sat"]) == (ids["cat"], ids["sat"])
    with pytest.raises(ValueError, match="order"):
        LodrLm(low, lm, 0.3)
    with pytest.raises(ValueError, match="lodr_scale"):
        lm.with_lodr(low, -0.1)
    assert fusion_defaults(False)[2] == 0.0 and fusion_defaults(True)[2] > 0


def test_one_loader_gives_beam_search_its_lms_with_or_without_lodr(tmp_path):
    """lm_files finds PREFIX-MODE files; load_fusion_lms binds the modes that have an LM, wraps each
    with its bigram when LODR is on and refuses a missing bigram; decode.py turns that into an exit."""
    from types import SimpleNamespace

    from zipformer_pc.decoding.decode import load_lms
    from zipformer_pc.lm import BoundLm, LodrLm, lm_files, load_fusion_lms

    tokens = ["<blk>"] + VOCAB + ["<unk>"]
    NgramLm.train(TEXT, 3, vocab=VOCAB).write_arpa(tmp_path / "lm-P.arpa.gz")
    NgramLm.train(TEXT, 3, vocab=VOCAB).write_arpa(tmp_path / "lm-N.arpa")
    NgramLm.train(TEXT, 2, vocab=VOCAB).write_arpa(tmp_path / "lodr-P.arpa.gz")
    files = lm_files(tmp_path, ["P", "N"])
    assert files == {"lm-P": tmp_path / "lm-P.arpa.gz", "lm-N": tmp_path / "lm-N.arpa",
                     "lodr-P": tmp_path / "lodr-P.arpa.gz"}
    plain = load_fusion_lms(files, ["P", "N"], tokens)
    assert sorted(plain) == ["N", "P"] and all(type(lm) is BoundLm for lm in plain.values())
    assert list(load_fusion_lms(files, ["P", "X"], tokens)) == ["P"]  # a mode without an LM: none
    lodr = load_fusion_lms(files, ["P"], tokens, lodr_scale=0.25)
    assert isinstance(lodr["P"], LodrLm)
    state = plain["P"].state_after([1, 2])
    assert lodr["P"].fusion([state], 0.6, 0.5)[0, 3] > plain["P"].fusion([state], 0.6, 0.5)[0, 3]
    with pytest.raises(FileNotFoundError, match="lodr-MODE.arpa.* for the modes N"):
        load_fusion_lms(files, ["P", "N"], tokens, lodr_scale=0.25)
    tokenizer = SimpleNamespace(pieces=tokens)
    assert sorted(load_lms(str(tmp_path), tokenizer, ["P", "N"])) == ["N", "P"]
    with pytest.raises(SystemExit, match="--lodr-scale 0.25.*modes N"):
        load_lms(str(tmp_path), tokenizer, ["P", "N"], lodr_scale=0.25)


# Training references in the synthetic corpus's form (local/text_cuts.py): the raw punctuated
# source, its P and N references.
AUSTEN = [
    "It is a truth universally acknowledged, that a single man in possession of a good fortune, "
    "must be in want of a wife.",
    "\"My dear Mr. Bennet,\" said his lady to him one day, \"have you heard that Netherfield Park is let at last?\"",
    "Mr. Bennet replied that he had not.",
    "\"But it is,\" returned she; \"for Mrs. Long has just been here, and she told me all about it.\"",
    "Mr. Bennet made no answer.",
    "\"Do you not want to know who has taken it?\" cried his wife impatiently.",
    "\"You want to tell me, and I have no objection to hearing it.\"",
    "This was invitation enough.",
    "Emma Woodhouse, handsome, clever, and rich, had lived nearly twenty-one years in the world.",
    "She was the youngest of the two daughters of a most affectionate, indulgent father.",
]


def test_train_lm_writes_a_p_and_an_n_model_from_training_references(tmp_path):
    """On a text-only manifest (local/text_cuts.py's cuts) and the shipped tokenizer: the same
    references the corpus's manifests carry, without building the corpus."""
    from lhotse import CutSet

    from conftest import ROOT, local_module

    train_lm = local_module("train_lm")
    text_cuts = local_module("text_cuts")
    # the first sentences twice: some trigrams are seen once (--prune 0,0,1 drops them), some twice
    utts = [{"id": f"train-{i:06d}", "text_raw": s} for i, s in enumerate(AUSTEN + AUSTEN[:4])]
    cuts = [tmp_path / "synth_cuts_train.jsonl.gz"]
    CutSet.from_cuts(text_cuts.text_cut(u) for u in utts).to_file(cuts[0])
    bpe = ROOT / "egs" / "synth" / "pretrained" / "bpe.model"
    train_lm.main(["--cuts", str(cuts[0]), "--bpe-model", str(bpe), "--out-dir", str(tmp_path), "--order", "3",
                   "--prune", "0,0,1"])
    lm_p, lm_n = (NgramLm.read_arpa(tmp_path / f"lm-{m}.arpa.gz") for m in "PN")
    seen_p = {t for g in lm_p.probs if len(g) == 2 for t in g}
    seen_n = {t for g in lm_n.probs if len(g) == 2 for t in g}
    assert {",", "."} <= seen_p and not ({",", "."} & seen_n)
    assert any(t.strip("\u2581")[:1].isupper() for t in seen_p)
    assert not any(t.strip("\u2581")[:1].isupper() for t in seen_n)
    with pytest.raises(SystemExit, match="modes"):
        train_lm.main(["--cuts", str(cuts[0]), "--bpe-model", str(bpe), "--out-dir", str(tmp_path), "--modes", "X"])
    # the LODR bigrams: other names, order 2, unpruned; the LMs beside them untouched
    before = (tmp_path / "lm-P.arpa.gz").read_bytes()
    train_lm.main(["--cuts", str(cuts[0]), "--bpe-model", str(bpe), "--out-dir", str(tmp_path), "--order", "2",
                   "--prune", "", "--prefix", "lodr"])
    low = NgramLm.read_arpa(tmp_path / "lodr-P.arpa.gz")
    # the same text's bigrams as the 3-gram LM's (its --prune 0,0,1 drops trigrams only)
    assert low.order == 2 and {g for g in low.probs if len(g) == 2} == {g for g in lm_p.probs if len(g) == 2}
    assert NgramLm.read_arpa(tmp_path / "lodr-N.arpa.gz").order == 2
    assert (tmp_path / "lm-P.arpa.gz").read_bytes() == before
