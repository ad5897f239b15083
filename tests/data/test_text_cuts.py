"""local/text_cuts.py: a corpus's text as a cut manifest without speech, for the text models
(pretrain.sh --text-hours), refused when it holds a text of the sets the models are measured on."""

import json

import pytest
from conftest import local_module, write_text_cuts

from zipformer_pc.data.references import SYNTH_PUNCT, SupervisionsOnce, get_n, get_p, reference_fields

UTTS = [
    {"id": "train-000000", "text_raw": "\u201cWhat is it?\u201d said she; \u201cthe Colonel is come!\u201d"},
    {"id": "train-000001", "text_raw": "Mister Darcy bowed, and walked away."},
]


def write_text(path, utts):
    path.write_text("".join(json.dumps(u) + "\n" for u in utts))
    return path


def test_the_manifest_holds_the_references_the_corpus_gives_those_texts(tmp_path):
    script = local_module("text_cuts")
    out = tmp_path / "text_cuts.jsonl.gz"
    script.main(["--text", str(write_text(tmp_path / "train.jsonl", UTTS)), "--out", str(out)])
    sups = list(SupervisionsOnce([str(out)]))
    assert [s.id for s in sups] == ["train-000000", "train-000001"]
    for sup, u in zip(sups, UTTS):
        want = reference_fields(u["text_raw"], config=SYNTH_PUNCT)
        assert get_n(sup) == want["text"] and get_p(sup) == want["custom"]["text_p"]
    # the synthetic corpus's marks: ! read as . and ; dropped
    assert get_p(sups[0]) == "What is it? said she the Colonel is come."
    assert get_n(sups[1]) == "mister darcy bowed and walked away"


def test_a_text_holding_a_held_out_sentence_is_refused_and_bad_lines_are_named(tmp_path):
    script = local_module("text_cuts")
    text = write_text(tmp_path / "train.jsonl", UTTS)
    test = write_text_cuts(tmp_path / "test.jsonl.gz", [("t1", "x", "X.")])
    # write_text_cuts keeps no raw text: the P reference is the text compared
    leak = write_text_cuts(tmp_path / "leak.jsonl.gz", [("t2", "x", UTTS[1]["text_raw"])])
    out = tmp_path / "out.jsonl.gz"
    script.main(["--text", str(text), "--out", str(out), "--held-out", str(test)])
    assert out.is_file()
    out.unlink()
    with pytest.raises(SystemExit, match=r"1 utterances of .* \(e.g. train-000001\) are texts of --held-out"):
        script.main(["--text", str(text), "--out", str(out), "--held-out", str(test), str(leak)])
    assert not out.exists()
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(UTTS[0]) + "\n" + json.dumps({"id": "x"}) + "\n")
    with pytest.raises(SystemExit, match=r"bad.jsonl:2: not an utterance"):
        script.main(["--text", str(bad), "--out", str(out)])
    with pytest.raises(SystemExit, match="no such file"):
        script.main(["--text", str(tmp_path / "missing.jsonl"), "--out", str(out)])
