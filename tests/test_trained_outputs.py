"""Once trained, the conditioned model's P output is punctuated and cased and its N output is not.

A tiny conditioned model is trained on three short utterances of the tiny
corpus (one question, one with a comma) until it has memorised them
(validation loss ~0.001 per utterance).  This is an over-fitting test, not an
accuracy claim: it checks that one predictor fed with the two mode embeddings
gives two different transcripts of the same audio (N lowercase without marks,
P cased and punctuated), and that decoding, detokenisation and scoring deliver
them intact.

The core check scores the references instead of decoding: in each mode the
model must give its own reference a loss near zero and the other mode's
reference a loss many nats higher.  Decoding is checked more loosely, because
a model that memorised three utterances need not align tokens with the audio:
the encoder only has to tell the utterances apart.  Measured on such a model:
8 tokens emitted in a burst on frame 0 and 11 on the last frame (per-frame
greedy search with one symbol per frame stops after "elinor smi"; we decode
with ``--max-sym-per-frame 100``), and the "e" of "persuade" spread over 50
frames with a probability of 0.05 to 0.44 on each (its total is ~1, so the
loss is near zero, yet greedy search takes blank on every frame).  Which
tokens this hits changes from run to run and machine to machine, so exact
transcripts made the test flaky.  :func:`check_outputs` is tested below on
outputs recorded from such runs and on outputs it must reject.

The three utterances are also chosen so that, within each, no two-token
predictor context is followed by two different tokens.  In "You have but one
style among you." the context ("e", "_") precedes both "s" and "a"; the tiny
model sometimes settles on a 50/50 guess there for hundreds of batches (loss
stuck at ln 4).
"""

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]
REPEATS = 100  # copies of each utterance per epoch
EPOCHS = 5  # ~500 batches of 2-3 utterances, ~3.5 min on 2 cores
MAX_SYM = 100  # symbols per frame in decoding (see the module doc)


def predictor_ambiguous(cut, tokenizer, context_size: int = 2) -> bool:
    """True if, in N or in P, some context of ``context_size`` tokens is followed
    by two different tokens (or by a token and the end) within this utterance."""
    sup = cut.supervisions[0]
    for text in (sup.text, sup.custom["text_p"]):
        ids = [0] * context_size + tokenizer.encode(text) + [-1]
        seen = {}
        for i in range(context_size, len(ids)):
            if seen.setdefault(tuple(ids[i - context_size:i]), ids[i]) != ids[i]:
                return True
    return False


def pick_three(cuts, tokenizer):
    """The shortest question, the shortest cut with a comma, and the shortest other cut,
    among the cuts the predictor context does not make ambiguous (see the module doc)."""
    by_len = sorted((c for c in cuts if not predictor_ambiguous(c, tokenizer)), key=lambda c: c.duration)
    question = next((c for c in by_len if c.supervisions[0].custom["text_p"].endswith("?")), None)
    assert question is not None, "the tiny corpus has no unambiguous question"
    comma = next((c for c in by_len if "," in c.supervisions[0].custom["text_p"] and c.id != question.id), None)
    assert comma is not None, "the tiny corpus has no unambiguous cut with a comma"
    other = next((c for c in by_len if c.id not in (question.id, comma.id)), None)
    assert other is not None, "the tiny corpus has too few unambiguous cuts"
    return [question, comma, other]


@pytest.fixture(scope="module")
def memorised_model(tiny_corpus, tmp_path_factory):
    from lhotse import CutSet

    from zipformer_pc.data.tokenizer import Tokenizer

    work = tmp_path_factory.mktemp("memorised")
    tokenizer = Tokenizer(str(tiny_corpus / "lang_bpe_120" / "bpe.model"))
    three = pick_three(CutSet.from_file(tiny_corpus / "fbank" / "synth_cuts_train_p1.jsonl.gz"), tokenizer)
    CutSet.from_cuts(three).to_file(work / "three.jsonl.gz")
    CutSet.from_cuts(c.with_id(f"{c.id}-copy{i}") for i in range(REPEATS) for c in three).to_file(
        work / "train.jsonl.gz")
    exp_dir = work / "exp"
    cmd = [
        sys.executable, "-m", "zipformer_pc.training.train", "--exp-dir", str(exp_dir),
        "--train-cuts", str(work / "train.jsonl.gz"), "--valid-cuts", str(work / "three.jsonl.gz"),
        "--bpe-model", str(tiny_corpus / "lang_bpe_120" / "bpe.model"), "--model-type", "conditioned",
        "--encoder", "tiny", "--num-epochs", str(EPOCHS), "--max-duration", "8", "--num-buckets", "1",
        "--spec-augment", "false", "--base-lr", "0.05", "--warmup-batches", "20",
        "--loss", "full", "--ctc-loss-scale", "0",  # as measured when this test was written
        "--lr-batches", "150", "--lr-epochs", "100000", "--num-threads", "2", "--seed", "42",
        "--save-every-n", "100000", "--valid-interval", "100000", "--keep-last-k", "1",
        "--tensorboard", "false", "--log-interval", "100",
    ]
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=1200)
    assert r.returncode == 0, r.stderr[-4000:]
    return exp_dir, work / "three.jsonl.gz", three


def decode(memorised_model, bpe_model):
    """decode.py (greedy) on the three utterances -> ({mode: {cut id: (ref, hyp)}}, {mode: summary})."""
    exp_dir, cuts, _ = memorised_model
    cmd = [sys.executable, "-m", "zipformer_pc.decoding.decode", "--exp-dir", str(exp_dir), "--epoch", str(EPOCHS), "--avg", "1",
           "--use-averaged-model", "false", "--bpe-model", str(bpe_model), "--test-sets", f"three={cuts}",
           "--num-threads", "2", "--max-sym-per-frame", str(MAX_SYM)]
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-4000:]
    pairs, summaries = {}, {}
    for mode in ("N", "P"):
        stem = f"three-{mode}-greedy_search-epoch-{EPOCHS}-avg-1-max-sym-{MAX_SYM}"
        lines = (exp_dir / "greedy_search" / f"recogs-{stem}.txt").read_text().splitlines()
        out = {}
        for line in lines:
            cut_id, rest = line.split(":\t", 1)
            kind, words = rest.split("=", 1)
            out.setdefault(cut_id, {})[kind] = " ".join(ast.literal_eval(words))
        pairs[mode] = {k: (v["ref"], v["hyp"]) for k, v in out.items()}
        summaries[mode] = json.loads((exp_dir / "greedy_search" / f"wer-summary-{stem}.json").read_text())
    return pairs, summaries


def check_outputs(pairs, summ):
    """Both transcripts of a model that has (partly) memorised the three utterances."""
    for cut_id, (ref, hyp) in pairs["N"].items():
        assert hyp and not re.search(r"[A-Z.,?!]", hyp), (cut_id, hyp)  # N: lowercase, no marks
    for cut_id, (ref, hyp) in pairs["P"].items():
        assert hyp and hyp[0].isupper(), (cut_id, hyp)  # P: sentence case
    # P is punctuated (the scores test below checks every mark of every utterance)
    assert any(re.search(r"[.,?]", hyp) for ref, hyp in pairs["P"].values()), pairs["P"]
    # most words right in both modes (an untrained model is near 100%)
    assert summ["N"]["wer"] <= 60.0 and summ["P"]["wer_c"] <= 60.0, (summ["N"]["wer"], summ["P"]["wer_c"])


# Greedy outputs recorded from training runs of this module (references as in
# the tiny corpus; one symbol per frame unless "max-sym 100" says otherwise),
# and outputs check_outputs must reject.
REFS = {"N": ["elinor smiled and shook her head", "have you not seen this", "then you will persuade him to go away"],
        "P": ["Elinor smiled, and shook her head.", "Have you not seen this?", "Then you will persuade him to go away?"]}
RECORDED = {
    "seed 42, repeatable audio": {"N": ["elinor smi", "have you not seen this", "then you will persuad"],
                                  "P": ["Elinor smi", "Have you not seen this", "Then you will persuade him to go away?"]},
    "seed 42, repeatable audio, max-sym 100": {
        "N": ["elinor smiled and shook her head", "have you not seen this", "then you will persuad"],
        "P": REFS["P"]},
    "seed 42": {"N": ["elinor smi", "have you not seen this", "then you will persuad"],
                "P": ["Elinor smiled, and shook her head.", "Have you not seen this?",
                      "Then you will persuade him to go away?"]},
    "seed 7": {"N": ["elinor s", "have you not seen this", "then you will persuad"],
               "P": ["Elinor s", "Have you not seen this?", "Then you will persuade him to go away?"]},
    "ctc 0.5": {"N": ["elinor smiled and shook her head", "have you not seen this", "then you will persuad"],
                "P": ["Elinor smiled, and shook her head.", "Have you not seen this?",
                      "Then you will persuade him to go away"]},
}
REJECTED = {
    "untrained": {"N": ["the", "the", "the"], "P": ["The", "The", "The"]},
    "N carries marks": {"N": ["elinor smiled, and shook her head.", "have you not seen this?", "then you will"],
                        "P": REFS["P"]},
    "P lowercase": {"N": REFS["N"], "P": ["elinor smiled, and shook her head.", "Have you not seen this?",
                                          "Then you will persuade him to go away?"]},
    "P without marks": {"N": REFS["N"], "P": ["Elinor smiled and shook her head", "Have you not seen this",
                                              "Then you will persuade him to go away"]},
    "empty N": {"N": ["", "have you not seen this", "then you will persuade him to go away"], "P": REFS["P"]},
}


def score(hyps):
    from zipformer_pc.metrics import score_corpus

    pairs = {m: {f"cut{i}": (r, h) for i, (r, h) in enumerate(zip(REFS[m], hyps[m]))} for m in ("N", "P")}
    summ = {m: score_corpus((u, r, h) for u, (r, h) in pairs[m].items()).summary() for m in ("N", "P")}
    return pairs, summ


@pytest.mark.parametrize("name", sorted(RECORDED))
def test_check_outputs_accepts_recorded_runs(name):
    check_outputs(*score(RECORDED[name]))


@pytest.mark.parametrize("name", sorted(REJECTED))
def test_check_outputs_rejects(name):
    with pytest.raises(AssertionError):
        check_outputs(*score(REJECTED[name]))


def test_p_output_is_punctuated_and_cased_and_n_output_is_not(memorised_model, tiny_corpus):
    pairs, summ = decode(memorised_model, tiny_corpus / "lang_bpe_120" / "bpe.model")
    check_outputs(pairs, summ)


def test_each_mode_scores_its_own_reference_far_above_the_other(memorised_model, tiny_corpus):
    """Transducer loss of the N and P references under each mode of the memorised model."""
    import torch
    from lhotse import CutSet

    from zipformer_pc.training.checkpoint import load_model_for_inference
    from zipformer_pc.data.dataset import PCAsrDataset
    from zipformer_pc.data.tokenizer import Tokenizer
    from zipformer_pc.modes import MODE_N, MODE_P
    from zipformer_pc.model.loss import LossConfig

    exp_dir, cuts, _ = memorised_model
    model = load_model_for_inference(exp_dir, epoch=EPOCHS, avg=1, use_averaged_model=False)
    batch = PCAsrDataset(Tokenizer(str(tiny_corpus / "lang_bpe_120" / "bpe.model")))[CutSet.from_file(cuts)]
    with torch.no_grad():
        enc, enc_lens = model.encoder(batch["features"], batch["feature_lens"])
        for i, cut_id in enumerate(batch["cut_ids"]):
            loss = {
                (mode, ref): model.forward_head(enc[i:i + 1], enc_lens[i:i + 1], [batch[f"tokens_{ref}"][i]], mode,
                                                LossConfig(backend="full")).item()
                for mode in (MODE_N, MODE_P) for ref in ("n", "p")
            }
            # measured: own reference ~0.002 nats, the other one 21 to 69 nats
            assert loss[MODE_N, "n"] < 0.5 and loss[MODE_P, "p"] < 0.5, (cut_id, loss)
            assert loss[MODE_N, "p"] > loss[MODE_N, "n"] + 10, (cut_id, loss)
            assert loss[MODE_P, "n"] > loss[MODE_P, "p"] + 10, (cut_id, loss)


def test_predictor_ambiguity_check():
    from types import SimpleNamespace

    class Words:  # one token per word; 0 is blank
        vocab = {}

        def encode(self, text):
            return [self.vocab.setdefault(w, len(self.vocab) + 1) for w in text.split()]

    def cut(n, p):
        return SimpleNamespace(supervisions=[SimpleNamespace(text=n, custom={"text_p": p})])

    words = Words()
    assert not predictor_ambiguous(cut("have you not seen this", "Have you not seen this ?"), words)
    # "one _" is followed by "style" and later by "among" (the case behind the old flakiness)
    assert predictor_ambiguous(cut("a one _ style one _ among", "A one _ style one _ among ."), words)
    # only P is ambiguous: a context followed by a token and, at the end, by nothing
    assert predictor_ambiguous(cut("x y z", "x y . x y"), words)
