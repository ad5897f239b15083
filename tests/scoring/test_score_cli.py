"""Tests of scoring/score.py (run as a subprocess) and zipformer_pc.transcripts."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import text_cut, write_text_cuts
from zipformer_pc.transcripts import (
    TranscriptError,
    pair_transcripts,
    read_speakers,
    read_transcripts,
)

ROOT = Path(__file__).resolve().parents[2]
SCORE = ROOT / "scoring" / "score.py"
EXAMPLES = ROOT / "scoring" / "examples"
HEADER = "| system | WER | PuncER | CaseER | PC-WER | PER | WER-C | WER-PC |"


def run_score(*args):
    return subprocess.run(
        [sys.executable, str(SCORE), *map(str, args)],
        cwd=str(ROOT),
        capture_output=True,
        text=True,
        timeout=120,
    )


def write(path, text):
    path.write_text(text, encoding="utf-8")
    return path


def recogs_line(utt, side, words):
    return f"{utt}:\t{side}={words!r}\n"


@pytest.fixture
def plain_files(tmp_path):
    # u1: "Hello world." vs "hello world."  case error only
    # u2: "Good day, sir." has no hypothesis -> scored against ""
    # u3: hypothesis without reference -> not scored
    ref = write(tmp_path / "ref.txt", "u1\tHello world.\nu2\tGood day, sir.\n")
    hyp = write(tmp_path / "hyp.txt", "u1\thello world.\nu3\textra words\n")
    return ref, hyp


def approx(x):
    return pytest.approx(x, rel=1e-9, abs=1e-9)


# ------------------------------------------------------------- JSON output


def test_json_output_keys_and_values(plain_files):
    ref, hyp = plain_files
    r = run_score("--ref", ref, "--hyp", hyp, "--json")
    assert r.returncode == 0, r.stderr
    lines = [ln for ln in r.stdout.splitlines() if ln.strip()]
    assert len(lines) == 1  # one JSON object, nothing else on stdout
    s = json.loads(lines[0])
    for key in ("wer", "wer_c", "wer_p", "pc_wer", "punc_er", "case_er", "per", "per_marks", "counts"):
        assert key in s, key
    # u1: E_np_nc 0, E_np_c 1, E_p_nc 0, E_p_c 1; N_np 2, N_p-tokens 3, N_p 1, N_c 1
    # u2 (empty hyp): E_np 3, E_p 5; N_np 3, N_p-tokens 5, N_p 2, N_c 1
    # WER 3/5=60, WER-C 4/5=80, WER-P 5/8, PC-WER 6/8=75,
    # PuncER (5-3)/3, CaseER (4-3)/2=50, PER: C=1, D=2 -> 2/3
    c = s["counts"]
    assert (c["E_np_nc"], c["N_np_nc"], c["E_np_c"], c["E_p_nc"], c["E_p_c"], c["N_p_c"]) == (
        3, 5, 4, 5, 6, 8)
    assert (c["N_p"], c["N_c"]) == (3, 2)
    assert s["num_utts"] == 2
    assert s["wer"] == approx(60.0)
    assert s["wer_c"] == approx(80.0)
    assert s["wer_p"] == approx(62.5)
    assert s["pc_wer"] == approx(75.0)
    assert s["punc_er"] == approx(200 / 3)
    assert s["case_er"] == approx(50.0)
    assert s["per"] == approx(200 / 3)
    assert s["missing_hyp"] == 1
    assert s["extra_hyp"] == 1


def test_missing_hypothesis_scored_as_empty(tmp_path):
    ref = write(tmp_path / "ref.txt", "a\tone two three\nb\tfour five\n")
    hyp = write(tmp_path / "hyp.txt", "a\tone two three\n")
    r = run_score("--ref", ref, "--hyp", hyp, "--json")
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    # b is all deletions: 2 errors over 5 reference words.
    assert s["num_utts"] == 2
    assert s["missing_hyp"] == 1 and s["extra_hyp"] == 0
    assert s["counts"]["E_np_nc"] == 2
    assert s["wer"] == approx(40.0)


def test_extra_hypotheses_counted_not_scored(tmp_path):
    ref = write(tmp_path / "ref.txt", "a\tone two\n")
    hyp = write(tmp_path / "hyp.txt", "a\tone two\nz\tnoise\ny\tmore noise\n")
    r = run_score("--ref", ref, "--hyp", hyp, "--json")
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    assert s["num_utts"] == 1
    assert s["extra_hyp"] == 2 and s["missing_hyp"] == 0
    assert s["wer"] == 0.0


# ------------------------------------------------------------- human report


def test_human_report_prints_markdown_table(plain_files):
    ref, hyp = plain_files
    r = run_score("--ref", ref, "--hyp", hyp, "--name", "mysys")
    assert r.returncode == 0, r.stderr
    out = r.stdout.splitlines()
    assert HEADER in out
    i = out.index(HEADER)
    assert out[i + 1].startswith("|---|")
    row = [c.strip() for c in out[i + 2].strip("|").split("|")]
    # WER 60, PuncER 66.67, CaseER 50, PC-WER 75, PER 66.67, WER-C 80, WER-PC 75
    assert row == ["mysys", "60.00", "66.67", "50.00", "75.00", "66.67", "80.00", "75.00"]
    assert "| Metrics | Period | Comma | Question Mark |" in out
    assert "Traceback" not in r.stderr


# ------------------------------------------------------------- icefall recogs


@pytest.fixture
def recogs_file(tmp_path):
    text = (
        recogs_line("utt1", "ref", ["Hello", "world."])
        + recogs_line("utt1", "hyp", ["hello", "world"])
        + "\n"
        + recogs_line("utt2", "ref", ["Good", "day."])
        + recogs_line("utt2", "hyp", ["good", "day."])
    )
    assert text.startswith("utt1:\tref=['Hello', 'world.']\nutt1:\thyp=['hello', 'world']\n")
    return write(tmp_path / "recogs-test.txt", text)


def test_recogs_for_ref_and_hyp(recogs_file):
    r = run_score("--ref", recogs_file, "--hyp", recogs_file, "--json")
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    # utt1: case error (Hello) + deleted "."; utt2: case error (Good).
    # WER 0; CaseER (2-0)/2 = 100; PuncER (1-0)/2 = 50; PER C=1 D=1 -> 50.
    assert s["num_utts"] == 2
    assert s["missing_hyp"] == 0 and s["extra_hyp"] == 0
    assert s["wer"] == 0.0
    assert s["case_er"] == approx(100.0)
    assert s["punc_er"] == approx(50.0)
    assert s["per"] == approx(50.0)


def test_recogs_mixed_with_plain(recogs_file, tmp_path):
    hyp = write(tmp_path / "hyp.txt", "utt1\tHello world.\nutt2\tGood day.\n")
    r = run_score("--ref", recogs_file, "--hyp", hyp, "--json")
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    assert s["pc_wer"] == 0.0 and s["per"] == 0.0


# ------------------------------------------------------------- errors


def _assert_clean_failure(r, path, lineno):
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    assert f"{path}:{lineno}" in r.stderr


def test_duplicate_id_in_ref(tmp_path):
    ref = write(tmp_path / "ref.txt", "u1\ta b\nu2\tc\nu1\td\n")
    hyp = write(tmp_path / "hyp.txt", "u1\ta b\n")
    r = run_score("--ref", ref, "--hyp", hyp)
    _assert_clean_failure(r, ref, 3)
    assert "duplicate" in r.stderr.lower()
    assert "'u1'" in r.stderr


def test_duplicate_id_in_hyp(tmp_path):
    ref = write(tmp_path / "ref.txt", "u1\ta b\n")
    hyp = write(tmp_path / "hyp.txt", "\nu1\ta b\nu1\ta c\n")
    r = run_score("--ref", ref, "--hyp", hyp, "--json")
    _assert_clean_failure(r, hyp, 3)
    assert r.stdout == ""


def test_duplicate_id_in_compare_file(tmp_path):
    ref = write(tmp_path / "ref.txt", "u1\ta b\n")
    hyp = write(tmp_path / "hyp.txt", "u1\ta b\n")
    other = write(tmp_path / "other.txt", "u1\ta b\nu1\ta c\n")
    r = run_score("--ref", ref, "--hyp", hyp, "--compare", other)
    _assert_clean_failure(r, other, 2)


def test_malformed_recogs_line(tmp_path):
    text = (
        recogs_line("utt1", "ref", ["Hello", "world."])
        + recogs_line("utt1", "hyp", ["hello", "world"])
        + "utt2 ref=['broken']\n"
    )
    bad = write(tmp_path / "recogs-bad.txt", text)
    r = run_score("--ref", bad, "--hyp", bad)
    _assert_clean_failure(r, bad, 3)
    assert "recogs" in r.stderr


def test_unparsable_recogs_token_list(tmp_path):
    text = recogs_line("utt1", "ref", ["a"]) + "utt1:\thyp=[not, python]\n"
    bad = write(tmp_path / "recogs-bad.txt", text)
    r = run_score("--ref", bad, "--hyp", bad)
    _assert_clean_failure(r, bad, 2)


# ------------------------------------------------------------- compare / errs


def test_compare_adds_significance(tmp_path):
    refs = [f"u{i}\tThe quick brown fox jumps, over the dog." for i in range(12)]
    ref = write(tmp_path / "ref.txt", "\n".join(refs) + "\n")
    hyp_a = write(tmp_path / "a.txt", "\n".join(refs) + "\n")
    # B: a varying number of word errors (1 or 2) on every utterance.
    b_lines = []
    for i in range(12):
        h = "The quick brown box jumps, over the dog." if i % 2 else "The quick brown box bumps, over the dog."
        b_lines.append(f"u{i}\t{h}")
    hyp_b = write(tmp_path / "b.txt", "\n".join(b_lines) + "\n")
    r = run_score("--ref", ref, "--hyp", hyp_a, "--compare", hyp_b, "--json")
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    sig = s["significance"]
    assert sig["a"] == str(hyp_a) and sig["b"] == str(hyp_b)
    tests = sig["tests"]
    assert set(tests) == {"wer", "punc_er", "case_er", "pc_wer"}
    assert tests["wer"]["better"] == "A"
    assert tests["wer"]["p_value"] < 0.05
    assert tests["punc_er"]["better"] == "same"
    boot = sig["bootstrap"]
    assert set(boot) == {"wer", "pc_wer", "per"}
    assert boot["wer"]["p_b_worse"] == 1.0 and boot["wer"]["resamples"] == 1000
    assert boot["per"]["p_b_worse"] == 0.0 and boot["per"]["p_b_better"] == 0.0  # the comma is right in both
    # Human report shows both rows and the test.
    r2 = run_score("--ref", ref, "--hyp", hyp_a, "--compare", hyp_b, "--name", "A")
    assert r2.returncode == 0, r2.stderr
    assert HEADER in r2.stdout
    assert "MAPSSWE" in r2.stdout
    assert "Paired bootstrap (1000 resamples" in r2.stdout
    assert any(ln.split()[:1] == ["wer"] and "B worse 1.000" in ln for ln in r2.stdout.splitlines())
    assert any(ln.startswith(f"| {hyp_b} |") for ln in r2.stdout.splitlines())


def test_errs_file_written(plain_files, tmp_path):
    ref, hyp = plain_files
    errs = tmp_path / "sub" / "errs.txt"
    errs.parent.mkdir()
    r = run_score("--ref", ref, "--hyp", hyp, "--errs-file", errs)
    assert r.returncode == 0, r.stderr
    text = errs.read_text(encoding="utf-8")
    assert text.startswith("%WER = 60.00\n")
    assert "%PC-WER = 75.00 [ 6 / 8 ]" in text
    assert "u1:\t(Hello->hello) world ." in text
    for section in ("SUBSTITUTIONS", "DELETIONS", "INSERTIONS"):
        assert section in text


# ------------------------------------------------------------- bundled examples


def test_bundled_examples_score():
    ref, hyp = EXAMPLES / "ref.txt", EXAMPLES / "hyp.txt"
    r = run_score("--ref", ref, "--hyp", hyp, "--json")
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    n = len([ln for ln in ref.read_text(encoding="utf-8").splitlines() if ln.strip()])
    assert s["num_utts"] == n
    assert s["missing_hyp"] == 0 and s["extra_hyp"] == 0
    for key in ("wer", "punc_er", "case_er", "pc_wer", "per"):
        assert s[key] is not None and s[key] >= 0
    r2 = run_score("--ref", ref, "--hyp", hyp)
    assert r2.returncode == 0, r2.stderr
    assert HEADER in r2.stdout


# ------------------------------------------------------------- transcripts module


def test_read_transcripts_tab_and_space(tmp_path):
    p = write(
        tmp_path / "t.txt",
        "a\tHello,  world.\n"  # tab: the rest of the line is the text
        "b Kaldi style line\n"  # space separated
        "\n"
        "   \n"  # blank lines are skipped
        "c\n"  # id only: empty transcript
        "d\ttext with\ta tab\n"  # only the first tab separates
        "e\t\n",
    )
    t = read_transcripts(str(p))
    assert list(t) == ["a", "b", "c", "d", "e"]
    assert t["a"] == "Hello,  world."
    assert t["b"] == "Kaldi style line"
    assert t["c"] == ""
    assert t["d"] == "text with\ta tab"
    assert t["e"] == ""


def test_read_transcripts_side_is_ignored_for_plain_files(tmp_path):
    p = write(tmp_path / "t.txt", "a\tone\n")
    assert read_transcripts(str(p), "ref") == read_transcripts(str(p), "hyp") == {"a": "one"}
    with pytest.raises(ValueError):
        read_transcripts(str(p), "both")


def test_read_transcripts_duplicate_names_file_and_line(tmp_path):
    p = write(tmp_path / "t.txt", "a x\n\nb y\na z\n")
    with pytest.raises(TranscriptError) as e:
        read_transcripts(str(p))
    assert f"{p}:4" in str(e.value)


def test_read_transcripts_recogs_sides(recogs_file):
    assert read_transcripts(str(recogs_file), "ref") == {"utt1": "Hello world.", "utt2": "Good day."}
    assert read_transcripts(str(recogs_file), "hyp") == {"utt1": "hello world", "utt2": "good day."}


def test_read_transcripts_recogs_errors(tmp_path):
    p = write(tmp_path / "r.txt", recogs_line("u", "ref", ["a"]) + "u:\thyp=[1, 2]\n")
    with pytest.raises(TranscriptError, match="list of strings"):
        read_transcripts(str(p), "hyp")
    q = write(tmp_path / "q.txt", recogs_line("u", "ref", ["a"]) + "garbage\n")
    with pytest.raises(TranscriptError) as e:
        read_transcripts(str(q), "ref")
    assert f"{q}:2" in str(e.value)


def test_pair_transcripts():
    refs = {"b": "two", "a": "one", "c": "three"}
    hyps = {"a": "one", "x": "extra", "c": "tree"}
    p = pair_transcripts(refs, hyps)
    # Reference order; missing hypothesis scored as empty text.
    assert p.triples == [("b", "two", ""), ("a", "one", "one"), ("c", "three", "tree")]
    assert p.missing_hyp == ["b"]
    assert p.extra_hyp == ["x"]
    full = pair_transcripts({"a": "1"}, {"a": "1"})
    assert full.missing_hyp == [] and full.extra_hyp == []


def test_compare_with_constant_difference_prints_strict_json(tmp_path):
    # Zero-variance differences used to produce W = -inf, i.e. invalid JSON.
    ref = tmp_path / "ref.txt"
    ref.write_text("u1\ta b\nu2\tc d\n")
    a = tmp_path / "a.txt"
    a.write_text("u1\ta b\nu2\tc d\n")
    b = tmp_path / "b.txt"
    b.write_text("u1\ta\nu2\tc\n")
    r = subprocess.run([sys.executable, str(SCORE), "--ref", str(ref), "--hyp", str(a),
                        "--compare", str(b), "--json"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout, parse_constant=lambda c: pytest.fail(f"non-JSON constant {c}"))
    wer = out["significance"]["tests"]["wer"]
    assert wer["w"] is None and wer["p_value"] == 0.5 and wer["significant"] is False


def test_non_utf8_compare_file_is_a_clear_error(tmp_path):
    ref = tmp_path / "ref.txt"
    ref.write_text("u1\ta b\n")
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"u1\t\xff\xfe\n")
    r = subprocess.run([sys.executable, str(SCORE), "--ref", str(ref), "--hyp", str(ref),
                        "--compare", str(bad)], capture_output=True, text=True)
    assert r.returncode == 2
    assert str(bad) in r.stderr and "UTF-8" in r.stderr
    assert "Traceback" not in r.stderr


def test_read_transcripts_runtime_output_by_mode(tmp_path):
    """The runtime's --output lines (id, mode, text) are read one mode at a time, never as ids with text 'P ...'."""
    p = write(tmp_path / "out.txt", "u1\tP\tHello, world.\nu1\tN\thello world\nu2\tP\tYes?\nu2\tN\tyes\n")
    assert read_transcripts(str(p), "hyp", "P") == {"u1": "Hello, world.", "u2": "Yes?"}
    assert read_transcripts(str(p), "ref", "N") == {"u1": "hello world", "u2": "yes"}
    with pytest.raises(TranscriptError, match=r"modes N P: choose the mode to score \(--mode\)"):
        read_transcripts(str(p), "hyp")
    with pytest.raises(ValueError, match="mode must be one of"):
        read_transcripts(str(p), "hyp", "X")
    dup = write(tmp_path / "dup.txt", "u1\tP\tA.\nu1\tP\tB.\n")
    with pytest.raises(TranscriptError, match=f"{dup}:2: duplicate"):
        read_transcripts(str(dup), "hyp", "P")


def test_score_cli_reads_a_cut_manifests_references(tmp_path):
    """A cut manifest as REF: --mode picks N (``text``) or P (``custom["text_p"]``); cuts without P
    are counted and left out of P's scores; the runtime's output as HYP."""
    ref = write_text_cuts(tmp_path / "cuts.jsonl.gz", [("c1", "hello there world", "Hello there, world."),
                                                       ("c2", "good day", None)])
    hyp = write(tmp_path / "out.txt", "c1\tP\tHello there world.\nc1\tN\thello there word\n"
                                      "c2\tP\tGood day.\nc2\tN\tgood day\n")
    r = run_score("--ref", ref, "--hyp", hyp, "--mode", "P", "--json")
    assert r.returncode == 0, r.stderr
    p = json.loads(r.stdout)
    assert p["num_utts"] == 1 and p["wer"] == 0.0 and p["per_marks"][","]["D"] == 1
    assert "1 of 2 cuts have no P reference" in r.stderr
    r = run_score("--ref", ref, "--hyp", hyp, "--mode", "N", "--json")
    n = json.loads(r.stdout)
    assert n["num_utts"] == 2 and n["counts"]["N_np_nc"] == 5 and n["wer"] == pytest.approx(20.0)
    r = run_score("--ref", ref, "--hyp", hyp)
    assert r.returncode == 2 and "choose one (--mode)" in r.stderr


def _speaker_cuts(path, rows):
    """A cut manifest of ``(cut id, speaker or None, N text, P text)`` rows."""
    from lhotse import CutSet

    cuts = []
    for cid, spk, n, p in rows:
        cut = text_cut(cid, n, {"text_p": p})
        cut.supervisions[0].speaker = spk
        cuts.append(cut)
    CutSet.from_cuts(cuts).to_file(path)
    return path


def test_per_speaker_scores_each_speakers_utterances(tmp_path):
    """--per-speaker: a row per speaker of the REF manifest (or of a Kaldi utt2spk file), each the
    scores of that speaker's utterances alone; the corpus row stays the scores of all of them."""
    ref = _speaker_cuts(tmp_path / "cuts.jsonl.gz", [
        ("a1", "spk-b", "one two three four", "One, two three four."),
        ("a2", "spk-a", "hello world", "Hello world."),
        ("a3", "spk-b", "good day", "Good day?"),
    ])
    hyp = write(tmp_path / "out.txt", "a1\tP\tOne two three for.\na2\tP\tHello world.\na3\tP\tgood day.\n")
    r = run_score("--ref", ref, "--hyp", hyp, "--mode", "P", "--json", "--per-speaker")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    by = out["speakers"]
    assert list(by) == ["spk-a", "spk-b"]
    assert by["spk-a"]["num_utts"] == 1 and by["spk-a"]["wer"] == 0.0 and by["spk-a"]["pc_wer"] == 0.0
    # spk-b: 1 of 6 words wrong ("for"); marks: "," deleted, "?" -> "."; "good" not capitalised
    assert by["spk-b"]["num_utts"] == 2 and by["spk-b"]["wer"] == approx(100 / 6)
    assert by["spk-b"]["per_marks"][","]["D"] == 1 and by["spk-b"]["per_marks"]["?"]["S"] == 1
    assert out["wer"] == approx(100 / 8) and out["num_utts"] == 3
    # the human report prints the rows with their utterance counts
    r = run_score("--ref", ref, "--hyp", hyp, "--mode", "P", "--per-speaker")
    assert "| spk-a (1) | 0.00 |" in r.stdout and "| spk-b (2) | 16.67 |" in r.stdout
    # a Kaldi utt2spk file for plain references; an utterance it does not name is an error
    plain_ref = write(tmp_path / "ref.txt", "a1\tOne, two three four.\na2\tHello world.\na3\tGood day?\n")
    plain_hyp = write(tmp_path / "hyp.txt", "a1\tOne two three for.\na2\tHello world.\na3\tgood day.\n")
    u2s = write(tmp_path / "utt2spk", "a1 x\na2 y\na3 x\n")
    r = run_score("--ref", plain_ref, "--hyp", plain_hyp, "--json", "--per-speaker", u2s)
    assert r.returncode == 0, r.stderr
    assert {k: v["num_utts"] for k, v in json.loads(r.stdout)["speakers"].items()} == {"x": 2, "y": 1}
    write(u2s, "a1 x\na2 y\n")
    r = run_score("--ref", plain_ref, "--hyp", plain_hyp, "--per-speaker", u2s)
    assert r.returncode == 2 and "no speaker for 1 of the 3 scored utterances" in r.stderr and "a3" in r.stderr
    # plain references name no speakers: --per-speaker needs a file then
    r = run_score("--ref", plain_ref, "--hyp", plain_hyp, "--per-speaker")
    assert r.returncode == 2 and "is not one: give a Kaldi utt2spk file" in r.stderr


def test_read_speakers_errors(tmp_path):
    ref = _speaker_cuts(tmp_path / "cuts.jsonl.gz", [("a1", "s", "hi", "Hi."), ("a2", None, "yo", "Yo.")])
    with pytest.raises(TranscriptError, match="cut 'a2' names no speaker"):
        read_speakers(ref)
    bad = write(tmp_path / "utt2spk", "a1 s\na1 t\n")
    with pytest.raises(TranscriptError, match="utt2spk:2: duplicate utterance id 'a1'"):
        read_speakers(bad)
