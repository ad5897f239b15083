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


def test_train_lm_writes_a_p_and_an_n_model_from_training_references(tiny_corpus, tmp_path):
    from conftest import local_module

    train_lm = local_module("train_lm")
    cuts = sorted((tiny_corpus / "fbank").glob("*_cuts_train.jsonl.gz"))
    bpe = next(tiny_corpus.glob("lang_bpe_*")) / "bpe.model"
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
