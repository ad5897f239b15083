"""scoring/make_results.py on fabricated decoding outputs (no training)."""

import json
import random
import subprocess
import sys
from pathlib import Path

from zipformer_pc.metrics import score_corpus
from zipformer_pc.text import normalized

ROOT = Path(__file__).resolve().parents[2]

REFS = [
    "Yes, I know. Do you?",
    "She said nothing, and he left.",
    "It is a truth universally acknowledged.",
    "Is he married or single?",
    "Elizabeth smiled, but said no more.",
    "Mister Darcy was silent.",
]


def write_recogs(path: Path, pairs):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        for utt, ref, hyp in pairs:
            f.write(f"{utt}:\tref={ref.split()}\n{utt}:\thyp={hyp.split()}\n")


def fabricate(exp: Path, name: str, test: str, hyp_p, n_utts: int = 60, cascade=False, seed=0):
    """recogs files for one system: P hypotheses from ``hyp_p(ref)``, N = normalized(P)."""
    rng = random.Random(seed)
    refs = [(f"utt{i:03d}", REFS[rng.randrange(len(REFS))]) for i in range(n_utts)]
    suffix = "greedy_search-epoch-2-avg-1-chunk-32-left-128" + ("-cascade" if cascade else "")
    d = exp / name / "greedy_search"
    write_recogs(d / f"recogs-{test}-P-{suffix}.txt", [(u, r, hyp_p(r)) for u, r in refs])
    write_recogs(d / f"recogs-{test}-N-{suffix}.txt", [(u, normalized(r), normalized(hyp_p(r))) for u, r in refs])
    return refs


def write_registry(exp: Path, names):
    """The rows of the experiment plan (egs/systems.tsv) for ``names``, as EXP/systems.tsv."""
    exp.mkdir(parents=True, exist_ok=True)
    lines = [line for line in (ROOT / "egs" / "systems.tsv").read_text().splitlines()
             if line.startswith("name\t") or line.split("\t", 1)[0] in names]
    (exp / "systems.tsv").write_text("\n".join(lines) + "\n")


def run(exp: Path, results: Path, data: Path):
    return subprocess.run(
        [sys.executable, "scoring/make_results.py", "--plan", str(exp / "systems.tsv"), "--exp-dir", str(exp),
         "--test-set", "test=in-domain", "--test-set", "test_ood=out-of-domain", "--data-dir", str(data),
         "--results-dir", str(results), "--num-epochs", "2", "--avg", "1", "--command", "bash run.sh --test"],
        cwd=ROOT, capture_output=True, text=True)


def row_cells(md: str, section: str, label: str):
    """The cells of the first row labelled ``label`` after heading ``section``."""
    text = md[md.index(section):]
    for line in text.splitlines():
        if line.startswith(f"| {label} |"):
            return [c.strip() for c in line.strip("|").split("|")]
    raise AssertionError(f"no row {label!r} after {section!r}")


def lowercase_no_marks(ref: str) -> str:
    return normalized(ref)


def test_tables_hold_the_scores_of_the_recognitions(tmp_path):
    exp, results, data = tmp_path / "exp", tmp_path / "res", tmp_path / "data"
    data.mkdir()
    (data / "stats.md").write_text("| manifest | utts |\n|---|---|\n| x | 1 |\n")
    write_registry(exp, ["cond_p", "punct_p", "norm", "cond_p0.2", "cond_rand0.2"])
    refs = fabricate(exp, "cond_p", "test", lambda r: r)  # perfect
    fabricate(exp, "punct_p", "test", lowercase_no_marks)  # loses every mark and capital
    fabricate(exp, "norm", "test", lambda r: r.replace(",", ""), cascade=True)  # loses commas
    fabricate(exp, "cond_p0.2", "test", lambda r: r.replace("?", "."))
    fabricate(exp, "cond_rand0.2", "test", lambda r: r.replace("?", ".").replace(",", ""))
    (exp / "timing.tsv").write_text("0\t60\tdata preparation\n1\t120\ttraining\n")
    # Whisper base's summaries (scoring/whisper_score.py), its text of test from the store
    (exp / "whisper_base").mkdir()
    for mode in ("N", "P"):
        (exp / "whisper_base" / f"wer-summary-test-{mode}-whisper-base.json").write_text(json.dumps(
            {"wer": 19.97, "pc_wer": 23.92, "punc_er": 38.7, "case_er": 13.4, "per": 33.8, "rtf": 0.151,
             "rtf_machine": "Xeon, 2 cores", "text_from": "whisper_store/whisper-base-test.tsv",
             "backend": "faster-whisper", "compute": "int8", "beam_size": "5", "threads": "1"}))
    r = run(exp, results, data)
    assert r.returncode == 0, r.stderr
    md = (results / "RESULTS.md").read_text()

    # Whisper base: its row in Table I, and where its RTF and text come from
    cells = row_cells(md, "## Table I", "Whisper base (not streaming)")
    assert cells[1:4] == ["680k h of real speech (P)", "74M", "0.15"] and "19.97" in cells
    table_one = md[md.index("## Table I"):md.index("## Table II")]
    assert "on Xeon, 2 cores." in table_one and "`whisper_store/whisper-base-test.tsv`" in table_one
    assert "Whisper base: faster-whisper (int8, beam 5, one thread), its text through" in table_one
    assert "Whisper base (not streaming)" not in md[md.index("## Table II"):md.index("## Table III")]  # not run

    # perfect system: zeros everywhere
    cells = row_cells(md, "## Table I", "conditioned")
    assert cells[1] == "P+N" and cells[4:8] == ["0.00", "0.00", "0.00", "0.00"]
    # punct_p drops every mark and capital: the values equal the scoring toolkit's
    expected = score_corpus([(u, r, lowercase_no_marks(r)) for u, r in refs]).summary()
    cells = row_cells(md, "## Table I", "punct")
    assert cells[4] == "0.00"  # WER (N output identical)
    assert cells[5] == f"{expected['punc_er']:.2f}*"  # significantly worse than the perfect reference
    assert cells[6] == f"{expected['case_er']:.2f}*"
    assert cells[7] == f"{expected['pc_wer']:.2f}*"
    # the cascade row reads the norm model's -cascade outputs
    cells = row_cells(md, "## Table I", "cascade: norm + restoration")
    assert cells[5] != "-" and float(cells[5].rstrip("*")) > 0
    # systems without outputs: dashes, and listed
    assert "## Missing outputs" in md
    assert "cond_p on test_ood" in md.split("## Missing outputs")[1]
    # Table III: fixed and random rows at 0.2
    fixed = row_cells(md, "## Table III", "cond_p0.2")
    rand = row_cells(md, "## Table III", "cond_rand0.2")
    assert fixed[1:3] == ["0.2", "fixed"] and rand[1:3] == ["0.2", "random"]
    assert float(rand[4].rstrip("*")) > float(fixed[4].rstrip("*"))  # PuncER: commas lost too
    # header: machine, command and wall time
    assert "bash run.sh --test" in md and "cores" in md and "Wall time of the run: 3.0 min" in md
    assert "| x | 1 |" in md  # data statistics copied
    assert (results / "figures" / "proportion.png").stat().st_size > 1000
    assert (results / "figures" / "punct_matrix.png").stat().st_size > 1000


def test_identical_systems_get_no_significance_mark(tmp_path):
    exp, results = tmp_path / "exp", tmp_path / "res"
    write_registry(exp, ["cond_p", "cond_p_a0.3"])
    hyp = lambda r: r.replace(",", "")  # noqa: E731
    fabricate(exp, "cond_p", "test", hyp)
    fabricate(exp, "cond_p_a0.3", "test", hyp)
    r = run(exp, results, tmp_path)
    assert r.returncode == 0, r.stderr
    md = (results / "RESULTS.md").read_text()
    cells = row_cells(md, "## Alpha", "cond_p_a0.3")
    assert cells[1] == "0.3" and "*" not in "".join(cells)
    assert float(cells[3]) > 0  # PuncER
    assert "are identical, in both modes, hence equal rows: cond_p = cond_p_a0.3." in md


def test_systems_with_different_transcripts_are_not_called_identical(tmp_path):
    exp, results = tmp_path / "exp", tmp_path / "res"
    write_registry(exp, ["cond_p", "cond_p_a0.3", "cond_p_a0.7"])
    fabricate(exp, "cond_p", "test", lambda r: r.replace(",", ""))
    fabricate(exp, "cond_p_a0.3", "test", lambda r: r.replace(",", ";"))  # close to cond_p, other strings
    fabricate(exp, "cond_p_a0.7", "test", lambda r: r)
    r = run(exp, results, tmp_path)
    assert r.returncode == 0, r.stderr
    assert "are identical" not in (results / "RESULTS.md").read_text()


def test_rtf_column_comes_from_measure_rtf_json(tmp_path):
    exp, results = tmp_path / "exp", tmp_path / "res"
    write_registry(exp, ["cond_p"])
    fabricate(exp, "cond_p", "test", lambda r: r)
    rows = [{"system": "cond_p", "num_threads": 1, "int8": False, "rtf": 0.0421},
            {"system": "cond_p", "num_threads": 2, "int8": True, "rtf": 0.011}]
    (exp / "rtf.json").write_text(json.dumps({"rows": rows}))
    (exp / "rtf.md").write_text("| system | RTF |\n|---|---|\n| cond_p | 0.042 |\n")
    r = run(exp, results, tmp_path)
    assert r.returncode == 0, r.stderr
    md = (results / "RESULTS.md").read_text()
    cells = row_cells(md, "## Table I", "conditioned")
    assert cells[3] == "0.04"  # 1 thread, fp32
    assert "| cond_p | 0.042 |" in md


def test_any_recipe_s_test_sets_and_decoding_method(tmp_path):
    """LibriSpeech's test sets and method (egs/librispeech/run.sh): the tables name them, nothing of synth's."""
    exp, results = tmp_path / "exp", tmp_path / "res"
    write_registry(exp, ["cond_p", "norm"])
    for name, cascade in (("cond_p", False), ("norm", True)):
        for test in ("test-clean", "test-other"):
            fabricate(exp, name, test, lambda r: r.replace(",", ""), cascade=cascade)
        # decoded with modified beam search instead
        (exp / name / "greedy_search").rename(exp / name / "modified_beam_search")
    r = subprocess.run(
        [sys.executable, "scoring/make_results.py", "--plan", str(exp / "systems.tsv"), "--exp-dir", str(exp),
         "--test-set", "test-clean=LibriSpeech test-clean", "--test-set", "test-other=LibriSpeech test-other",
         "--data-dir", str(tmp_path), "--results-dir", str(results), "--num-epochs", "2", "--avg", "1",
         "--decoding-method", "modified_beam_search", "--corpus", "LibriSpeech (test-clean,train-clean-100)"],
        cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    md = (results / "RESULTS.md").read_text()
    assert md.startswith("# Results: LibriSpeech (test-clean,train-clean-100)")
    assert "## Table I: `test-clean` (LibriSpeech test-clean)" in md
    assert "## Table II: `test-other` (LibriSpeech test-other)" in md
    assert "`test`" not in md and "test_ood" not in md
    for section in ("## Table I", "## Table II"):
        for label in ("conditioned", "cascade: norm + restoration"):
            cells = row_cells(md, section, label)
            assert float(cells[-6].rstrip("*")) > 0, (section, cells)  # PuncER: the commas are lost
    assert "## Missing outputs" not in md  # every output found under modified_beam_search/
    assert "Wall time" not in md  # no EXP_DIR/timing.tsv: no made-up total


def test_missing_registry_is_a_clear_error(tmp_path):
    r = run(tmp_path / "nothing", tmp_path / "res", tmp_path)
    assert r.returncode != 0
    assert "systems.tsv is missing" in r.stderr


def test_onnx_transcripts_are_compared_with_the_pytorch_decoding(tmp_path):
    exp, results, data = tmp_path / "exp", tmp_path / "res", tmp_path / "data"
    data.mkdir()
    write_registry(exp, ["cond_p"])
    refs = fabricate(exp, "cond_p", "test", lambda r: r, n_utts=10)
    # the ONNX runtime agrees on 9 of 10 utterances: the last one loses its final mark (P) and word (N)
    hyps = {u: {"P": r, "N": normalized(r)} for u, r in refs}
    u_last, r_last = refs[-1]
    hyps[u_last] = {"P": r_last[:-1], "N": " ".join(normalized(r_last).split()[:-1])}
    row = {"system": "cond_p", "model_type": "conditioned", "num_threads": 1, "int8": False, "precision": "fp32",
           "rtf": 0.1, "hyps": hyps}
    (exp / "rtf.json").write_text(json.dumps({"rows": [row, {**row, "num_threads": 2}]}))
    (exp / "rtf.md").write_text("| system | RTF |\n|---|---|\n| cond_p | 0.100 |\n")
    r = run(exp, results, data)
    assert r.returncode == 0, r.stderr
    md = (results / "RESULTS.md").read_text()
    section = md[md.index("ONNX streaming against the PyTorch decoding"):]
    cells = row_cells(section, "ONNX streaming", "cond_p")
    assert cells[1:5] == ["fp32", "10", "9 / 10", "9 / 10"]  # one row: the 1-thread run
    onnx_wer, torch_wer = (float(x) for x in cells[5].split(" / "))
    assert torch_wer == 0.0 and onnx_wer > 0.0
    assert section.count("| cond_p |") == 1


def test_latency_and_load_sections_come_from_their_measurements(tmp_path):
    exp, results = tmp_path / "exp", tmp_path / "res"
    write_registry(exp, ["cond_p"])
    fabricate(exp, "cond_p", "test", lambda r: r)
    latency_cmd = ("python scoring/measure_rtf.py --system chunk-16=exp/cond_p/onnx_chunk16 "
                   "--system chunk-32=exp/cond_p/onnx --latency true")
    (exp / "latency.json").write_text(json.dumps({"command": latency_cmd, "num_utts": 7, "audio_seconds": 90.0,
                                                  "piece_seconds": 0.1}))
    (exp / "latency.md").write_text("| system | RTF |\n|---|---|\n| chunk-16 | 0.031 |\n\n"
                                    "| system | chunk ms | mode |\n|---|---|---|\n| chunk-16 | 320 | P |\n")
    (exp / "load.json").write_text(json.dumps({"command": "python benchmarks/server_load.py --streams 1,4"}))
    (exp / "load.md").write_text("The server on 2 cores.\n\n| streams | agg RTF | identical |\n|---|---|---|\n"
                                 "| 4 | 0.052 | 4/4 |\n\nagg RTF: decoding time over audio.\n")
    r = run(exp, results, tmp_path)
    assert r.returncode == 0, r.stderr
    md = (results / "RESULTS.md").read_text()
    latency = md[md.index("## Caption latency and stability per chunk size"):md.index("## Server load")]
    assert f"Measured by `{latency_cmd}` on 7 utterances (1.5 min of audio) fed in 0.1 s pieces" in latency
    assert "| chunk-16 | 0.031 |" in latency and "| chunk-16 | 320 | P |" in latency
    load = md[md.index("## Server load"):]
    assert "Measured by `python benchmarks/server_load.py --streams 1,4`" in load
    assert "| 4 | 0.052 | 4/4 |" in load and "agg RTF: decoding time over audio." in load
    assert "Not measured" not in latency + load.split("\n## ")[0]


def test_latency_and_load_sections_say_how_to_measure_when_not_measured(tmp_path):
    exp, results = tmp_path / "exp", tmp_path / "res"
    write_registry(exp, ["cond_p"])
    fabricate(exp, "cond_p", "test", lambda r: r)
    (exp / "load.md").write_text("| streams | identical |\n|---|---|\n| 1 | 1/1 |\n")  # no load.json
    r = run(exp, results, tmp_path)
    assert r.returncode == 0, r.stderr
    md = (results / "RESULTS.md").read_text()
    latency = md[md.index("## Caption latency and stability per chunk size"):md.index("## Server load")]
    assert "Not measured in this run. Stage 5 of `egs/synth/run.sh` measures it (`--latency-chunks`" in latency
    assert "--latency true --output-md EXP_DIR/latency.md" in latency and "| chunk" not in latency
    load = md[md.index("## Server load"):].split("\n## ")[0]
    assert "Measured by `benchmarks/server_load.py`" in load and "| 1 | 1/1 |" in load
    (exp / "load.md").unlink()
    r = run(exp, results, tmp_path)
    assert r.returncode == 0, r.stderr
    md = (results / "RESULTS.md").read_text()
    load = md[md.index("## Server load"):].split("\n## ")[0]
    assert "Not measured in this run. Stage 5 of `egs/synth/run.sh` measures it (`--load-streams`)" in load
    assert "benchmarks/server_load.py --model-dir MODEL_DIR --streams 1,4,8,16,32 --output-md EXP_DIR/load.md" in load


def test_the_restoration_model_on_reference_words_is_reported_under_its_test_set(tmp_path):
    """The P' references come from the text restoration model: its own scores on the reference words
    (restore/SUBSET/results.json) are quoted under Table I / II, each under its own test set."""
    exp, results, data = tmp_path / "exp", tmp_path / "res", tmp_path / "data"
    write_registry(exp, ["cond_p", "punct_pauto"])
    fabricate(exp, "cond_p", "test", lambda r: r)
    fabricate(exp, "punct_pauto", "test", lowercase_no_marks)
    (data / "restore" / "p1").mkdir(parents=True)
    scores = {"test": {"punc_er": 78.114, "case_er": 22.89, "per": 68.468, "num_lines": 100},
              "test_ood": {"punc_er": 82.06, "case_er": 54.25, "per": 74.39}}
    (data / "restore" / "p1" / "results.json").write_text(json.dumps({"args": {}, "results": scores}))
    (data / "restore" / "p0.2").mkdir()
    (data / "restore" / "p0.2" / "results.json").write_text("{not json")  # unreadable: left out, no crash
    r = run(exp, results, data)
    assert r.returncode == 0, r.stderr
    md = (results / "RESULTS.md").read_text()
    table1, table2 = md.split("## Table I:")[1].split("## Table II:")
    table2 = table2.split("## Table III")[0]
    assert "`restore/p1`" in table1 and "PuncER 78.11, CaseER 22.89, PER 68.47" in table1
    assert "PuncER 82.06, CaseER 54.25, PER 74.39" in table2 and "78.11" not in table2
    assert "p0.2" not in md.split("## Table III")[0] and "unreadable" in r.stderr


def test_the_header_names_what_decoding_averaged_and_its_blank_penalty(tmp_path):
    exp, data = tmp_path / "exp", tmp_path / "data"
    data.mkdir()
    write_registry(exp, ["cond_p"])
    fabricate(exp, "cond_p", "test", lambda r: r)
    summary = exp / "cond_p" / "greedy_search" / "wer-summary-test-P-greedy_search-epoch-2-avg-1-chunk-32-left-128.json"
    headers = {}
    for penalty in (None, 0.0, 1.5):
        if penalty is not None:
            summary.write_text(json.dumps({"averaged": "mean of the weights after each of batches 7..12",
                                           "blank_penalty": penalty, "wer": 0.0}))
        r = run(exp, tmp_path / f"res{penalty}", data)
        assert r.returncode == 0, r.stderr
        md = (tmp_path / f"res{penalty}" / "RESULTS.md").read_text()
        headers[penalty] = md[md.index("Every model:"):].split("\n")[0]
    assert "greedy search, simulated streaming" in headers[None] and "(cond_p:" not in headers[None]
    assert "(cond_p: mean of the weights after each of batches 7..12), greedy search, no blank penalty, " \
        "simulated streaming" in headers[0.0]
    assert "greedy search, blank penalty 1.5, simulated streaming" in headers[1.5]


def test_the_data_table_joins_the_manifests_of_every_dataset(tmp_path):
    """--stats DATA/real/stats.md: test_real's manifest row joins the synthetic corpus's table (one
    header), text after the synthetic table stays after it, and a stats.md that is not there is left out."""
    from zipformer_pc.scoring.make_results import stats_table

    head = "| manifest | utts | with P |\n|---|---|---|\n"
    synth, real = tmp_path / "synth.md", tmp_path / "real.md"
    synth.write_text(head + "| synth_cuts_test.jsonl.gz | 100 | 100 |\n\nDurations in seconds.\n")
    real.write_text(head + "| real_cuts_test_real.jsonl.gz | 1291 | 202 |\n")
    assert stats_table([synth, real, tmp_path / "absent.md"]).splitlines() == [
        "| manifest | utts | with P |", "|---|---|---|", "| synth_cuts_test.jsonl.gz | 100 | 100 |",
        "| real_cuts_test_real.jsonl.gz | 1291 | 202 |", "", "Durations in seconds."]
    assert stats_table([tmp_path / "absent.md", real]) == real.read_text().strip()
    assert stats_table([tmp_path / "absent.md"]) == ""  # no Data section
