"""scoring/measure_rtf.py (streaming RTF + scores of exported models, cascade
included), benchmarks/sherpa_vs_ours.py and research/search_grid.py, on tiny
random models and cuts."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import script_module, write_wav
from zipformer_pc.metrics import score_corpus
from zipformer_pc.model.transducer import HeadConfig, build_model, make_model_config
from zipformer_pc.export import random_model
from zipformer_pc.export.onnx_export import export_model
from zipformer_pc.data.references import P_KEY
from zipformer_pc.runtime import StreamingRecognizer, find_model_files

ROOT = Path(__file__).resolve().parents[2]
measure_rtf = script_module("scoring/measure_rtf.py")
search_grid = script_module("research/search_grid.py")
sherpa_vs_ours = script_module("benchmarks/sherpa_vs_ours.py")

CHUNK, LEFT = 32, 64
VOCAB = 67
# (N reference, P reference or None): the second cut has no P reference
REFS = [("w6 x9 w12 w15", "W6 x9, w12 w15."), ("w3 w9 x12", None), ("w21 x24 w27", "W21 x24 w27?")]


def _random_export(model_type: str, tokens: Path, out: Path, calibration: np.ndarray) -> Path:
    torch.manual_seed(0)
    head = HeadConfig(model_type=model_type, vocab_size=VOCAB, decoder_dim=64, joiner_dim=64, mode_dim=8)
    model = build_model(make_model_config("tiny", {}, head)).eval()
    random_model.emit_like_a_trained_model(model, calibration, fraction=0.3)
    export_model(model, out, tokens, CHUNK, LEFT, int8=True)
    return out


def _restoration_onnx(path: Path) -> Path:
    """A tiny untrained restoration model exported the way zipformer_pc.restoration does."""
    from zipformer_pc.restoration.data import train_sentencepiece
    from zipformer_pc.restoration.export import export_onnx
    from zipformer_pc.restoration.model import RestorationConfig, RestorationModel, make_meta, save_restoration_checkpoint
    from zipformer_pc.runtime.restoration import PieceEncoder
    from zipformer_pc.text import DEFAULT_PUNCT

    lines = [" ".join(f"w{(i * 7 + k) % 40} x{(i + k) % 30}" for k in range(6)) for i in range(60)]
    spm_model = train_sentencepiece(lines, 40)
    torch.manual_seed(0)
    model = RestorationModel(RestorationConfig(vocab_size=PieceEncoder(spm_model).vocab_size, d_model=32, num_layers=1,
                                         num_heads=2, ff_dim=64, kernel_size=3, dropout=0.0)).eval()
    save_restoration_checkpoint(path.with_suffix(".pt"), model, spm_model, make_meta(DEFAULT_PUNCT, {}), {})
    export_onnx(str(path.with_suffix(".pt")), str(path))
    return path


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    from lhotse import CutSet, Recording, SupervisionSegment

    torch.set_num_threads(1)
    d = tmp_path_factory.mktemp("rtf")
    audio = [random_model.synthetic_utterance(1.2 + 0.3 * i, seed=i) for i in range(len(REFS))]
    tokens = d / "tokens.txt"
    random_model.write_tokens(tokens, VOCAB)
    cond = _random_export("conditioned", tokens, d / "cond", audio[0])
    norm = _random_export("norm", tokens, d / "norm", audio[0])
    restore = _restoration_onnx(d / "restore.onnx")
    cuts = []
    for i, ((n, p), x) in enumerate(zip(REFS, audio)):
        write_wav(d / f"u{i}.wav", x)
        rec = Recording.from_file(d / f"u{i}.wav", recording_id=f"u{i}")
        cut = rec.to_cut()
        cut.supervisions = [SupervisionSegment(id=f"u{i}", recording_id=f"u{i}", start=0.0, duration=rec.duration,
                                               text=n, custom={P_KEY: p} if p else None)]
        cuts.append(cut)
    CutSet.from_cuts(cuts).to_file(d / "cuts.jsonl.gz")
    # the samples measure_rtf decodes: the 16-bit wavs as lhotse reads them (the
    # float originals differ by the quantization, enough to flip a random model)
    audio = [c.load_audio()[0] for c in cuts]
    return {"dir": d, "cond": cond, "norm": norm, "restore": restore, "cuts": d / "cuts.jsonl.gz", "audio": audio}


def _direct_scores(hyps):
    """Score transcripts by utterance with zipformer_pc.metrics, as the paper's columns."""
    n = score_corpus([(f"u{i}", REFS[i][0], h["N"]) for i, h in enumerate(hyps)]).summary()
    p = score_corpus([(f"u{i}", REFS[i][1], h["P"]) for i, h in enumerate(hyps) if REFS[i][1]]).summary()
    return {"wer": n["wer"], "punc_er": p["punc_er"], "case_er": p["case_er"], "pc_wer": p["pc_wer"]}


def test_measure_rtf_rows_scores_and_cascade(setup, capsys):
    d = setup["dir"]
    md, js = d / "out" / "rtf.md", d / "out" / "rtf.json"
    measure_rtf.main(["--system", f"cond={setup['cond']}", "--system", f"cascade={setup['norm']}:{setup['restore']}",
                      "--cuts", str(setup["cuts"]), "--num-threads", "1,2", "--int8", "false,true",
                      "--output-md", str(md), "--output-json", str(js)])
    rows = json.loads(js.read_text())["rows"]
    assert [(r["system"], r["num_threads"], r["precision"]) for r in rows] == [
        (s, t, p) for s in ("cond", "cascade") for t in (1, 2) for p in ("fp32", "int8")]
    table = md.read_text().splitlines()
    assert table[0] == ("| system | model type | threads | precision | RTF | both/single | WER | PuncER | CaseER "
                        "| PC-WER |")
    assert len(table) == 2 + len(rows) and table == capsys.readouterr().out.strip().splitlines()[-len(table):]
    assert all(line.startswith("| cond | conditioned |") for line in table[2:6])
    assert all(line.startswith("| cascade | norm + restoration |") for line in table[6:])
    total = sum(len(x) for x in setup["audio"]) / 16000
    for r in rows:
        assert r["rtf"] > 0 and r["num_utts"] == 3 and r["audio_seconds"] == pytest.approx(total, abs=1e-3)
        assert r["num_utts_n"] == 3 and r["num_utts_p"] == 2
    for r in rows[:4]:  # two modes: also timed with P alone
        assert r["modes_searched"] == ["P", "N"] and r["single_mode"] == "P"
        assert r["rtf_single"] > 0 and r["both_single_ratio"] == pytest.approx(r["rtf"] / r["rtf_single"])
    for r in rows[4:]:
        assert r["modes_searched"] == ["N"] and r["both_single_ratio"] is None and r["restore_model"]

    from zipformer_pc.runtime.restoration import OnnxRestorer

    restorer = OnnxRestorer(str(setup["restore"]))
    for int8 in (False, True):
        cond = StreamingRecognizer(find_model_files(setup["cond"], int8))
        cond_hyps = [cond.recognize(x, 16000) for x in setup["audio"]]
        assert all(h["P"] and h["N"] for h in cond_hyps)  # the random model does emit
        norm = StreamingRecognizer(find_model_files(setup["norm"], int8))
        norm_n = [norm.recognize(x, 16000)["N"] for x in setup["audio"]]
        cascade_hyps = [{"N": n, "P": restorer.restore([n])[0]} for n in norm_n]
        assert any(h["P"] != h["N"] for h in cascade_hyps)  # restoration changed case or marks
        for sysname, hyps in (("cond", cond_hyps), ("cascade", cascade_hyps)):
            want = _direct_scores(hyps)
            for r in (r for r in rows if r["system"] == sysname and r["int8"] == int8):
                assert {k: r[k] for k in want} == pytest.approx(want), (sysname, int8, r["num_threads"])


def test_measure_rtf_single_mode_search(setup, tmp_path):
    js = tmp_path / "rtf.json"
    measure_rtf.main(["--system", f"cond={setup['cond']}", "--cuts", str(setup["cuts"]), "--modes", "N",
                      "--max-utterances", "2", "--output-json", str(js)])
    (r,) = json.loads(js.read_text())["rows"]
    assert r["modes_searched"] == ["N"] and r["num_utts"] == 2 and r["both_single_ratio"] is None
    assert r["wer"] is not None and r["punc_er"] is None and r["pc_wer"] is None


def test_measure_rtf_latency_table_and_command(setup, tmp_path):
    """--latency true: after the RTF table, per mode how late words and marks are shown (the table
    RESULTS.md copies); a cascade gets no latency row; the JSON keeps the command."""
    md, js = tmp_path / "latency.md", tmp_path / "latency.json"
    argv = ["--system", f"cond={setup['cond']}", "--system", f"cascade={setup['norm']}:{setup['restore']}",
            "--cuts", str(setup["cuts"]), "--max-utterances", "2", "--latency", "true",
            "--output-md", str(md), "--output-json", str(js)]
    measure_rtf.main(argv)
    info = json.loads(js.read_text())
    assert info["command"] == "python scoring/measure_rtf.py " + " ".join(argv)
    assert [r["system"] for r in info["rows"]] == ["cond", "cascade"] and info["num_utts"] == 2
    lat = info["latency_rows"]
    assert [(r["system"], r["mode"]) for r in lat] == [("cond", "N"), ("cond", "P")]
    for r in lat:
        assert r["chunk_ms"] == CHUNK * 20 and r["num_threads"] == 1 and r["words"] > 0  # 50 Hz encoder frames
        assert 0 <= r["delays_p50_ms"] <= r["delays_p90_ms"] <= r["delays_rt_p90_ms"]
        assert r["revisions_per_word"] == 0  # greedy search never takes a token back
    rtf_table, latency_table = md.read_text().strip().split("\n\n")
    assert len(rtf_table.splitlines()) == 2 + 2
    lines = latency_table.splitlines()
    assert lines[0] == "| " + " | ".join(measure_rtf.LATENCY_COLUMNS) + " |" and len(lines) == 2 + 2
    for line, r in zip(lines[2:], lat):
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert cells[:4] == ["cond", str(CHUNK * 20), r["mode"], str(r["words"])]
        assert cells[4] == " / ".join(f"{r[f'delays_{q}_ms']:.0f}" for q in ("mean", "p50", "p90"))


@pytest.mark.parametrize("spec,match", [
    ("nodir", "expected NAME=MODEL_DIR"),
    ("=x", "expected NAME=MODEL_DIR"),
    ("a=/nonexistent/model", "model directory /nonexistent/model does not exist"),
    ("a={cond}:/nonexistent/restore.onnx", "restoration model /nonexistent/restore.onnx does not exist"),
    ("a={dir}", "expected one encoder"),
    ("a={cond}:{encoder}", "not a restoration model export"),
    ("a={p_only}:{restore}", "a cascade restores the N output"),
])
def test_measure_rtf_bad_system_is_a_clear_error(setup, tmp_path, spec, match):
    p_only = tmp_path / "p_only"  # a P-only export: the cond files without decoder-N / joiner-N
    p_only.mkdir()
    for f in setup["cond"].iterdir():
        if not f.name.endswith(".int8.onnx") and "-N" not in f.name:
            (p_only / f.name).symlink_to(f)
    spec = spec.format(cond=setup["cond"], dir=setup["dir"], restore=setup["restore"], p_only=p_only,
                       encoder=find_model_files(setup["cond"])["encoder"])
    with pytest.raises(SystemExit) as e:
        measure_rtf.main(["--system", spec, "--cuts", str(setup["cuts"])])
    assert isinstance(e.value.code, str) and match in e.value.code, e.value.code
    with pytest.raises(SystemExit, match="names must be unique"):
        measure_rtf.main(["--system", f"a={setup['cond']}", "--system", f"a={setup['cond']}",
                          "--cuts", str(setup["cuts"])])


def test_measure_rtf_missing_int8_files(setup, tmp_path):
    fp32_only = tmp_path / "fp32"
    fp32_only.mkdir()
    for p in setup["cond"].iterdir():
        if not p.name.endswith(".int8.onnx"):
            (fp32_only / p.name).symlink_to(p)
    with pytest.raises(SystemExit, match=r"--system c: .*int8.*export with --int8 true"):
        measure_rtf.main(["--system", f"c={fp32_only}", "--cuts", str(setup["cuts"]), "--int8", "false,true"])
    with pytest.raises(SystemExit, match="--cuts .* does not exist"):
        measure_rtf.main(["--system", f"c={fp32_only}", "--cuts", str(tmp_path / "none.jsonl.gz")])


def test_sherpa_vs_ours_runs_a_tiny_model(capsys):
    results = sherpa_vs_ours.main(["--encoder", "tiny", "--duration", "2", "--num-utts", "1", "--repeats", "1"])
    out = capsys.readouterr().out
    assert set(results) == {"fp32", "int8"}
    for prec, r in results.items():
        assert r["modes"] == ["P", "N"]
        for key in ("sherpa-P", "sherpa-N", "ours-P", "ours-N", "ours-both"):
            assert r["best"][key] > 0, (prec, key)
        assert r["tokens"]["P"] > 0  # the calibrated random model emits
    assert results["fp32"]["agree"] == {"P": 1, "N": 1}  # same decoding as sherpa-onnx
    lines = out.splitlines()
    rows = [line.split() for line in lines if line.startswith(("fp32 ", "int8 ")) and "both" not in line]
    assert [(r[0], r[1], r[2]) for r in rows] == [("fp32", "1", "P"), ("fp32", "1", "N"), ("int8", "1", "P"),
                                                  ("int8", "1", "N")]
    for r in rows:
        sherpa_rtf, ours_rtf, ratio = map(float, r[3:6])
        # the three are printed rounded (RTFs to 4 decimals, the ratio to 2): allow for that
        slack = 0.0051 + 0.00005 * (1 / sherpa_rtf + ours_rtf / sherpa_rtf**2)
        assert sherpa_rtf > 0 and ours_rtf > 0 and ratio == pytest.approx(ours_rtf / sherpa_rtf, abs=slack)
    both = [line for line in lines if line.startswith(("fp32 ", "int8 ")) and " both " in line]
    assert [line.split()[0] for line in both] == ["fp32", "int8"]
    assert all("single P" in line and "single N" in line and "both/single" in line for line in both)


def test_sherpa_vs_ours_compares_each_sides_best_thread_setting(capsys):
    results = sherpa_vs_ours.main(["--encoder", "tiny", "--duration", "1.5", "--num-utts", "1", "--repeats", "1",
                                   "--precisions", "fp32,int8", "--threads", "1,2"])
    out = capsys.readouterr().out
    # each precision gets its best-setting rows (the second precision once failed on the first's)
    assert set(results) == {f"{p}-{k}" for p in ("fp32", "int8") for k in ("t1", "t2", "best-P", "best-N")}
    assert [results[k]["threads"] for k in ("fp32-t1", "fp32-t2")] == [1, 2]
    runs = [results["fp32-t1"], results["fp32-t2"]]
    for m in ("P", "N"):
        best = results[f"fp32-best-{m}"]
        # each side's best is its fastest thread setting, and the ratio is of those two
        fastest_sherpa = min(runs, key=lambda r: r["best"][f"sherpa-{m}"])
        fastest_ours = min(runs, key=lambda r: r["best"][f"ours-{m}"])
        assert best["sherpa_threads"] == fastest_sherpa["threads"]
        assert best["ours_threads"] == fastest_ours["threads"]
        assert best["ratio"] == pytest.approx(best["ours_rtf"] / best["sherpa_rtf"])
        assert f"fp32      {m}    sherpa-onnx" in out
    assert all(r["agree"] == {"P": 1, "N": 1} for r in runs)  # the thread count changes no text
    with pytest.raises(SystemExit, match="--threads"):
        sherpa_vs_ours.main(["--threads", "0"])


def test_search_grid_scores_each_cell_as_the_recognizer_does(setup, capsys):
    """One row per method x blank penalty, each with the scores of a recognizer built with those
    options (so a penalty that does nothing, or a cell that reused another's settings, shows)."""
    js = setup["dir"] / "grid.json"
    rows = search_grid.main(["--model-dir", str(setup["cond"]), "--cuts", str(setup["cuts"]), "--blank-penalties",
                             "0,3", "--output-json", str(js)])
    assert [(r["decoding_method"], r["blank_penalty"]) for r in rows] == [
        (m, b) for m in ("greedy_search", "modified_beam_search") for b in (0.0, 3.0)]
    assert json.loads(js.read_text())["rows"] == rows
    out = capsys.readouterr().out.splitlines()
    assert out[1].startswith("| search | blank penalty | WER (N) |") and len(out) == 3 + len(rows)
    assert out[3].startswith("| greedy | 0 |") and out[-1].startswith("| beam 4 | 3 |")
    for r in rows:
        rec = StreamingRecognizer(find_model_files(setup["cond"]), decoding_method=r["decoding_method"],
                                  blank_penalty=r["blank_penalty"])
        want = _direct_scores([rec.recognize(x, 16000) for x in setup["audio"]])
        assert {k: r[k] for k in want} == pytest.approx(want), r
        assert r["utts"] == 3 and r["rtf"] > 0
    assert rows[0]["wer"] != rows[1]["wer"]  # the penalty changes what greedy search writes
    with pytest.raises(SystemExit, match="--decoding-methods"):
        search_grid.main(["--model-dir", str(setup["cond"]), "--cuts", str(setup["cuts"]), "--decoding-methods", "beam"])
    with pytest.raises(SystemExit, match="--blank-penalties"):
        search_grid.main(["--model-dir", str(setup["cond"]), "--cuts", str(setup["cuts"]), "--blank-penalties", "nan"])
