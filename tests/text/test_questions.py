"""The question model (zipformer_pc.questions): training, the rewrite of P, storage, and its use by
the runtime, decoding's command line and local/train_questions.py."""

import gzip
import json
import shutil

import numpy as np
import pytest

from conftest import scripted_search, write_text_cuts
from zipformer_pc.questions import (FILE_NAME, VERSION, QuestionModel, decision_counts, features, sentences,
                                    train, tune_threshold, word_class)
from zipformer_pc.text import normalized

SUBJECTS = ["you", "she", "he", "they", "we", "i", "your sister", "the colonel", "mister darcy", "her mother"]
VERBS = ["like it", "know him", "come to the ball", "see the letter", "walk to town", "read the book"]


def corpus():
    """Sentences of a toy language: questions start with do/does/will or a wh-word, statements don't."""
    out = []
    for i, s in enumerate(SUBJECTS):
        for j, v in enumerate(VERBS):
            aux = ["do", "will", "why do", "when will"][(i + j) % 4]
            out.append((f"{aux} {s} {v}".split(), "?"))
            out.append((f"{s} {['will', 'must', 'may'][(i + j) % 3]} {v}".split(), "."))
            out.append((f"indeed, {s} {v}".replace(",", " ,").split(), "."))
    return out


@pytest.fixture(scope="module")
def model():
    return train(corpus(), seed=1)


def test_sentences_split_p_text_at_full_stops_and_question_marks_with_commas_kept():
    got = list(sentences("But, my dear, what is it? It is Mister Darcy. And then"))
    assert got == [(["but", ",", "my", "dear", ",", "what", "is", "it"], "?"), (["it", "is", "mister", "darcy"], ".")]
    # the one normalization: hyphens split, case folded, marks other than , left out
    assert list(sentences("A well-known; Tale.")) == [(["a", "well", "known", "tale"], ".")]


def test_features_read_the_start_the_end_and_each_comma_clause():
    f = features(["but", ",", "what", "is", "it"])
    assert {"f1=but", "l2=is it", "c1=what", "c2=what is", "lc1=what", "u=is", "b=but what", "n=4"} <= set(f)
    assert features([",", ","]) == []


def test_version_2_features_read_word_classes_at_clause_starts_and_a_short_last_clause():
    assert [word_class(w) for w in "did missus ferrars look well".split()] == ["AUX", "W", "W", "W", "W"]
    assert [word_class(w) for w in ["don't", "why", "you", "letter"]] == ["AUX", "WH", "PRON", "W"]
    f = set(features("and you are disengaged , are you not".split()))
    # clause starts by class (each clause, the first, the last), the tag with its own words, the last words
    assert {"cc=W PRON", "cc=AUX PRON", "fc=W PRON", "lcc=AUX PRON", "tag=AUX PRON not",
            "lwc=AUX PRON W"} <= f
    assert not any(x.startswith("tag=") for x in features("did missus ferrars look well to you".split()))
    # "must you" and "did she" share their class pattern, whatever the verb
    assert "fc=AUX PRON" in set(features("must you go".split())) & set(features("did she go".split()))


def test_training_learns_the_toy_questions_and_is_reproducible(model):
    assert model.is_question("will the colonel see the letter".split())
    assert not model.is_question("the colonel will see the letter".split())
    assert decision_counts(model, corpus()) == {"tp": 60, "fp": 0, "fn": 0, "tn": 120}
    again = train(corpus(), seed=1)
    assert again.weights == model.weights and again.bias == model.bias
    assert train(corpus(), seed=2).weights != model.weights  # the seed orders the updates
    with pytest.raises(ValueError, match="no sentences"):
        train([])


def test_rewrite_turns_only_the_full_stops_of_questions_into_question_marks(model):
    text = "Will you come to the ball. I know him, do you know him. Indeed, she may come."
    out = model.rewrite_text(text)
    assert out == "Will you come to the ball? I know him, do you know him? Indeed, she may come."
    assert normalized(out) == normalized(text) and len(out) == len(text)
    # a ? the transducer wrote stays; words after the last mark are not a sentence yet
    assert model.rewrite_text("She may come? Do you") == "She may come? Do you"
    assert model.rewrite_text("") == ""


def test_rewriting_pieces_and_text_agree(model):
    """The runtime rewrites sentencepiece pieces, decoding rewrites the text: the same decisions."""
    pieces = ["\u2581Will", "\u2581you", "\u2581come", "\u2581to", "\u2581the", "\u2581ball", ".", "\u2581I",
              "\u2581know", "\u2581him", ".", "\u2581Do", "\u2581they", "\u2581like", "\u2581it", "?"]
    out = model.rewrite_pieces(pieces)
    assert [i for i, (a, b) in enumerate(zip(pieces, out)) if a != b] == [6]
    text = "".join(pieces).replace("\u2581", " ").strip()
    assert "".join(out).replace("\u2581", " ").strip() == model.rewrite_text(text)


def test_threshold_tuning_minimises_wrong_marks():
    class Scored:
        """Probabilities set by hand: one question the model doubts, two statements it half-believes."""
        threshold = 0.5
        p = {"q1": 0.95, "q2": 0.7, "q3": 0.35, "s1": 0.05, "s2": 0.45, "s3": 0.6}

        def probability(self, tokens):
            return self.p[tokens[0]]

    dev = [([k], "?" if k[0] == "q" else ".") for k in Scored.p]
    # wrong marks: t <= 0.35 -> 2 (s2, s3), 0.4 -> 3, 0.45 .. 0.6 -> 2, 0.65 and 0.7 -> 1 (q3), 0.75 -> 2;
    # of the equals the highest (fewer ? where unsure)
    assert tune_threshold(Scored(), dev) == 0.7
    assert decision_counts(Scored(), dev, 0.7) == {"tp": 2, "fp": 0, "fn": 1, "tn": 3}
    assert tune_threshold(Scored(), [e for e in dev if e[1] == "."]) == 0.5  # no question: nothing to tune


def test_saved_models_load_back_and_bad_files_say_what_they_are(model, tmp_path):
    path = tmp_path / FILE_NAME
    model.save(path)
    back = QuestionModel.load(path)
    assert back.weights == model.weights and back.threshold == model.threshold
    toks = "do they walk to town".split()
    assert back.probability(toks) == pytest.approx(model.probability(toks))
    assert path.read_bytes() == (model.save(tmp_path / "again.json.gz") or (tmp_path / "again.json.gz").read_bytes())
    with pytest.raises(FileNotFoundError, match="no such question model"):
        QuestionModel.load(tmp_path / "missing.json.gz")
    (tmp_path / "lm.json.gz").write_bytes(gzip.compress(b'{"weights": {}}'))
    with pytest.raises(ValueError, match="not a question model"):
        QuestionModel.load(tmp_path / "lm.json.gz")
    (tmp_path / "text.json.gz").write_text("not gzip")
    with pytest.raises(ValueError, match="not a question model"):
        QuestionModel.load(tmp_path / "text.json.gz")
    d = json.loads(gzip.decompress(path.read_bytes()))
    assert d["version"] == VERSION == 2
    # a version 1 file (no word-class features) still loads and scores as it did: weights of the
    # version 1 features only, so the added features find none
    added = ("cc", "fc", "lcc", "tag", "lwc")
    v1 = {k: w for k, w in model.weights.items() if k.split("=")[0] not in added}
    assert 0 < len(v1) < len(model.weights)
    (tmp_path / "v1.json").write_text(json.dumps(dict(d, version=1, weights=v1)))
    old = QuestionModel.load(tmp_path / "v1.json")
    z = model.bias + sum(v1.get(f, 0.0) for f in features(toks) if f.split("=")[0] not in added)
    assert old.probability(toks) == pytest.approx(1 / (1 + np.exp(-z)))
    d["version"] = 99
    (tmp_path / "new.json").write_text(json.dumps(d))
    with pytest.raises(ValueError, match="version 99, this code reads 1, 2"):
        QuestionModel.load(tmp_path / "new.json")
    with pytest.raises(ValueError, match="threshold"):
        QuestionModel({}, 0.0, threshold=1.0)


SCRIPT = {"P": {3: "\u2581She", 10: "\u2581read", 17: "s", 20: ",", 25: "\u2581it", 40: "."},
          "N": {3: "\u2581she", 10: "\u2581read", 17: "s", 25: "\u2581it"}}


def test_the_runtime_shows_question_marks_in_text_words_and_tokens(scripted_model, tmp_path):
    """With questions.json.gz in the model dir P's text, word and token times show ``?``; the
    search is unchanged, N too, and ``questions=False`` shows P as searched."""
    from zipformer_pc.runtime import StreamingRecognizer, find_model_files

    src, pieces = scripted_model
    model_dir = tmp_path / "onnx"
    shutil.copytree(src, model_dir)
    QuestionModel({}, 5.0).save(model_dir / FILE_NAME)  # every sentence is a question
    assert find_model_files(model_dir)["questions"] == model_dir / FILE_NAME
    audio = (0.1 * np.random.default_rng(0).standard_normal(int(2.3 * 16000))).astype(np.float32)
    results = {}
    for questions in (True, False):
        rec = StreamingRecognizer.from_dir(model_dir, questions=questions)
        rec._greedy = scripted_search(pieces, SCRIPT)
        (seg,) = rec.recognize_segments(audio, 16000, 0.1)
        results[questions] = seg
    on, off = results[True], results[False]
    assert off.text == {"P": "She reads, it.", "N": "she reads it"}
    assert on.text == {"P": "She reads, it?", "N": "she reads it"}
    assert [w.word for w in on.words["P"]] == ["She", "reads,", "it?"]
    assert [t.token for t in on.tokens["P"]][-1] == "?" and [t.token for t in off.tokens["P"]][-1] == "."
    assert [t.start for t in on.tokens["P"]] == [t.start for t in off.tokens["P"]]
    # a model dir without the file: P as searched
    assert StreamingRecognizer.from_dir(src).questions is None


def write_cuts(path, texts):
    """A cut manifest whose supervisions carry the P references ``texts`` (None: N only)."""
    write_text_cuts(path, [(cid, normalized(p or "x"), p) for cid, p in texts])


def test_train_questions_script_reads_each_utterance_once_and_tunes_on_dev(tmp_path, caplog):
    from conftest import local_module

    pairs = [(s, v) for s in SUBJECTS for v in VERBS]
    train_texts = [(f"q{i}", f"Do {s} {v}?") for i, (s, v) in enumerate(pairs)] + \
        [(f"s{i}", f"Indeed, {s} {v}.") for i, (s, v) in enumerate(pairs)]
    train_texts += [(cid + "_sp0.9", p) for cid, p in train_texts[:5]] + [("nop", None)]
    write_cuts(tmp_path / "train.jsonl.gz", train_texts)
    write_cuts(tmp_path / "dev.jsonl.gz", [("d1", "Do they like it? Indeed, we like it."), ("d2", "Do we know him?")])
    out = tmp_path / FILE_NAME
    script = local_module("train_questions")
    with caplog.at_level("INFO"):
        script.main(["--cuts", str(tmp_path / "train.jsonl.gz"), "--dev-cuts", str(tmp_path / "dev.jsonl.gz"),
                     "--out", str(out)])
    assert "1 without a P reference, 5 speed-perturbed copies skipped" in caplog.text
    m = QuestionModel.load(out)
    assert m.info["sentences"] == len(SUBJECTS) * len(VERBS) * 2 and m.info["questions"] == len(SUBJECTS) * len(VERBS)
    assert m.info["dev"] == {"tp": 2, "fp": 0, "fn": 0, "tn": 1} and 0 < m.threshold < 1
    assert m.rewrite_text("Do you see the letter. Indeed, you see it.") == \
        "Do you see the letter? Indeed, you see it."
    with pytest.raises(SystemExit, match="--epochs"):
        script.main(["--cuts", str(tmp_path / "train.jsonl.gz"), "--out", str(out), "--epochs", "0"])
    write_cuts(tmp_path / "statements.jsonl.gz", [("s1", "It is late."), ("s2", "We know him.")])
    with pytest.raises(SystemExit, match="no question"):
        script.main(["--cuts", str(tmp_path / "statements.jsonl.gz"), "--out", str(out)])


def test_a_full_stop_after_an_endpoint_joins_its_sentence_as_a_question_mark(scripted_model, tmp_path):
    """A mark the search emits after an endpoint ends the previous segment's sentence
    (``_reattach_leading_marks``): the question model decides it with that sentence's words."""
    from zipformer_pc.runtime import StreamingRecognizer
    from zipformer_pc.runtime.endpoint import EndpointConfig

    src, pieces = scripted_model
    model_dir = tmp_path / "onnx"
    shutil.copytree(src, model_dir)
    QuestionModel({}, 5.0).save(model_dir / FILE_NAME)
    script = {"P": {3: "\u2581She", 10: "\u2581read", 17: "s", 25: "\u2581it", 60: "."},
              "N": {3: "\u2581she", 10: "\u2581read", 17: "s", 25: "\u2581it"}}
    audio = (0.1 * np.random.default_rng(0).standard_normal(3 * 16000)).astype(np.float32)
    segments = {}
    for questions in (True, False):
        rec = StreamingRecognizer.from_dir(model_dir, questions=questions,
                                           endpoint=EndpointConfig.from_options(rule2_min_trailing_silence=0.4))
        rec._greedy = scripted_search(pieces, script)
        segments[questions] = rec.recognize_segments(audio, 16000, 0.1)
    (on,), (off,) = segments[True], segments[False]
    assert off.text["P"] == "She reads it." and on.text["P"] == "She reads it?"
    assert on.words["P"][-1].word == "it?" and on.tokens["P"][-1].token == "?"
    # the endpoint came before the mark (frame 60): the segment ends just after the moved mark,
    # not at the end of the audio (3 s)
    assert on.end == off.end == pytest.approx(61 * StreamingRecognizer.from_dir(src).frame_seconds)


def test_a_new_threshold_takes_effect_on_sentences_already_decided():
    toks = "do they walk to town".split()
    m = QuestionModel({"f1=do": 1.0}, 0.0, threshold=0.8)
    assert m.probability(toks) == pytest.approx(1 / (1 + np.exp(-1.0)))  # 0.73
    assert not m.is_question(toks)
    m.threshold = 0.6  # as local/train_questions.py sets the tuned one
    assert m.is_question(toks)
