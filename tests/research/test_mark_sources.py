"""research/mark_sources.py: where a system's inserted marks fall in the raw source text."""

from conftest import script_module, text_cut

ms = script_module("research/mark_sources.py")


def test_inserted_commas_are_traced_to_the_raw_marks_p_dropped():
    p_ref = "He came and I am sure he stayed. It was late, she said."
    raw = "He came; and I am sure: he stayed. It was late, she said."
    # commas after "came" (raw ;), "sure" (raw :), "and" (nothing); the one after "late" is in P too;
    # the one after "stayed" replaces P's full stop (a substitution, not an insertion)
    hyp = "He came, and, I am sure, he stayed, it was late, she said."
    assert ms.raw_marks_at_insertions(p_ref, raw, hyp, ",") == [";", "", ":"]
    # a misrecognised word is not matched: its comma is not counted
    assert ms.raw_marks_at_insertions(p_ref, raw, "He game, and I am sure he stayed.", ",") == []
    # raw and P words that differ cannot be lined up
    assert ms.raw_marks_at_insertions(p_ref, "He came; and I am quite sure he stayed.", hyp, ",") is None


def test_the_command_counts_over_a_manifest(tmp_path, capsys):
    from lhotse import CutSet

    cuts = tmp_path / "cuts.jsonl.gz"
    rows = [("a", "He came and I am sure he stayed.", "He came; and I am sure: he stayed."),
            ("b", "Yes, she said.", "Yes, she said."),
            ("c", "Oh it is you.", "Oh; it is you."),
            ("d", None, None)]  # no P reference (withheld by a proportion subset): not read
    CutSet.from_cuts(text_cut(cid, "n", {"text_p": p, "text_raw": raw} if p else None)
                     for cid, p, raw in rows).to_file(cuts)
    hyps = tmp_path / "out.tsv"
    hyps.write_text("a\tP\tHe came, and I am sure, he stayed.\na\tN\the came and i am sure he stayed\n"
                    "b\tP\tYes, she, said.\n")
    ms.main(["--cuts", str(cuts), "--hyps", str(hyps)])
    out = capsys.readouterr().out
    assert "3 ',' inserted after correctly recognised words, in 2 utterances" in out
    assert "(0 left out: raw and P words differ; 1 without a hypothesis)" in out
    assert "| ; | 1 | 33.3% |" in out and "| : | 1 | 33.3% |" in out and "| (none) | 1 | 33.3% |" in out
