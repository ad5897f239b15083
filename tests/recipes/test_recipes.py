"""tools/check_args.py, the LibriSpeech recipe's dry run, and scoring/whisper_score.py."""

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
PY = sys.executable


def load_script(rel: str):
    """A script of tools/ or scoring/ as a module (they are not packages)."""
    path = ROOT / rel
    spec = importlib.util.spec_from_file_location("_test_" + path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def check_args():
    return load_script("tools/check_args.py")


def run(cmd, env=None, timeout=120):
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                          env=None if env is None else {**os.environ, **env})


# ------------------------------------------------------------ check_args


def train_args(exp: Path):
    return ["--train-cuts", "train.jsonl.gz", "--valid-cuts", "dev.jsonl.gz", "--bpe-model", "bpe.model",
            "--exp-dir", str(exp)]


def test_check_args_accepts_good_arguments_and_runs_nothing(check_args, tmp_path, capsys):
    exp = tmp_path / "exp"
    assert check_args.main(["zipformer_pc.training.train", *train_args(exp), "--model-type", "conditioned",
                            "--world-size", "4", "--use-fp16", "true", "--punct-proportion", "0.2"]) == 0
    assert check_args.main(["-m", "zipformer_pc.decoding.decode", "--exp-dir", str(exp), "--epoch", "40", "--avg", "15",
                            "--bpe-model", "bpe.model", "--test-sets", "test-clean=t.jsonl.gz",
                            "--decoding-method", "modified_beam_search", "--chunk-size", "32",
                            "--left-context-frames", "128"]) == 0
    assert check_args.main(["zipformer_pc.export", "--exp-dir", str(exp), "--epoch", "40", "--avg", "15",
                            "--tokens", "tokens.txt", "--int8", "true"]) == 0
    out = capsys.readouterr().out
    assert out.count("OK ") == 3 and "OK zipformer_pc.training.train:" in out and "OK zipformer_pc.export:" in out
    # train.py would create its log dir, decode.py its output dir, the export EXP/onnx
    assert not exp.exists()


@pytest.mark.parametrize(
    "target, args, message",
    [
        ("zipformer_pc.training.train", ["--no-such-option", "1"], "unrecognized arguments: --no-such-option 1"),
        ("zipformer_pc.training.train", ["--model-type", "bogus"], "argument --model-type: invalid choice: 'bogus'"),
        ("zipformer_pc.decoding.decode", ["--decoding-method", "beam_search"], "invalid choice: 'beam_search'"),
        ("zipformer_pc.export", ["--int8", "maybe"], "argument --int8: expected true/false, got 'maybe'"),
        ("zipformer_pc.export", ["--chunk-size", "x32"], "argument --chunk-size: invalid int value: 'x32'"),
    ],
)
def test_check_args_rejects_bad_options_and_choices(check_args, tmp_path, capsys, target, args, message):
    base = {
        "zipformer_pc.training.train": train_args(tmp_path / "exp"),
        "zipformer_pc.decoding.decode": ["--exp-dir", str(tmp_path / "exp"), "--bpe-model", "b", "--test-sets", "t=x"],
        "zipformer_pc.export": ["--exp-dir", str(tmp_path / "exp"), "--tokens", "tokens.txt"],
    }[target]
    assert check_args.main([target, *base, *args]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert f"check_args: {target}: arguments do not parse" in err
    assert not (tmp_path / "exp").exists()


def test_check_args_reports_missing_required_option(check_args, capsys):
    assert check_args.main(["zipformer_pc.export", "--exp-dir", "x"]) == 2
    assert "the following arguments are required: --tokens" in capsys.readouterr().err


def test_check_args_cli_exit_code_and_message():
    r = run([PY, "tools/check_args.py", "-m", "zipformer_pc.training.train", "--train-cuts", "a", "--valid-cuts", "b",
             "--bpe-model", "c", "--exp-dir", "x", "--loss", "fancy"])
    assert r.returncode == 2
    assert "argument --loss: invalid choice: 'fancy'" in r.stderr
    assert "Traceback" not in r.stderr


FAKE_SCRIPT = '''
import argparse
from pathlib import Path

MARK = Path(__file__).with_name("main_ran")


def get_parser():
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--mode", choices=["a", "b"], default="a")
    return p


def main():
    MARK.write_text("main ran")
'''


def test_check_args_never_runs_main(check_args, tmp_path, capsys):
    guarded = tmp_path / "guarded.py"
    guarded.write_text(FAKE_SCRIPT + '\nif __name__ == "__main__":\n    main()\n')
    assert check_args.main([str(guarded), "--out", "o", "--mode", "b"]) == 0
    assert check_args.main([str(guarded), "--out", "o", "--mode", "c"]) == 2
    assert "invalid choice: 'c'" in capsys.readouterr().err
    # a script that would run main() on import is refused, not imported
    unguarded = tmp_path / "unguarded.py"
    unguarded.write_text(FAKE_SCRIPT + "\nmain()\n")
    assert check_args.main([str(unguarded), "--out", "o"]) == 3
    assert "calls main() at import time" in capsys.readouterr().err
    assert not (tmp_path / "main_ran").exists()


def test_check_args_takes_a_package_s_main_as_python_m_does(check_args, capsys):
    # python -m zipformer_pc.server runs zipformer_pc/server/__main__.py
    assert check_args.main(["-m", "zipformer_pc.server", "--model-dir", "x", "--port", "6006"]) == 0
    assert check_args.main(["-m", "zipformer_pc.server", "--model-dir", "x", "--no-such", "1"]) == 2
    assert "unrecognized arguments: --no-such" in capsys.readouterr().err


def test_check_args_without_get_parser_or_target(check_args, tmp_path, capsys):
    script = tmp_path / "no_parser.py"
    script.write_text("import argparse\n\ndef main():\n    argparse.ArgumentParser().parse_args()\n")
    assert check_args.main([str(script), "--x", "1"]) == 3
    assert "has no top-level get_parser()" in capsys.readouterr().err
    # a script written elsewhere that is not there yet: reported, or skipped when allowed
    assert check_args.main(["export/not_written_yet.py", "--x", "1"]) == 3
    assert "export/not_written_yet.py does not exist" in capsys.readouterr().err
    assert check_args.main(["--allow-missing", "export/not_written_yet.py", "export/not_written_yet.py"]) == 0
    assert "SKIPPED export/not_written_yet.py" in capsys.readouterr().out


def test_check_args_shell_options(check_args, capsys):
    assert check_args.main(["prepare.sh", "--dataset", "librispeech", "--stage", "0", "--stop-stage", "6",
                            "--speed-perturb=false", "--restore-subsets", "p1"]) == 0
    assert check_args.main(["./prepare.sh", "--no-such", "1"]) == 2
    assert "unknown option --no-such" in capsys.readouterr().err
    assert check_args.main(["prepare.sh", "--dataset"]) == 2
    assert "option --dataset needs a value" in capsys.readouterr().err
    # an option declared without a value (run.sh: unset = the size preset, empty = none)
    assert check_args.main(["egs/synth/run.sh", "--load-streams", "1,2", "--num-batches", "5"]) == 0
    assert check_args.main(["egs/synth/run.sh", "--load-stream", "1"]) == 2


def test_check_args_commands_file(check_args, tmp_path, capsys):
    cmds = tmp_path / "cmds.txt"
    cmds.write_text(
        "# a comment\n"
        f"python3 -m zipformer_pc.training.train {' '.join(train_args(tmp_path / 'e'))} --alpha 0.3\n"
        "python3 -m zipformer_pc.export --exp-dir e --tokens t --left-context-frames 128\n"
        "bash ./prepare.sh --dataset librispeech\n"
        "python3 export/later.py --anything 1\n"
        "\n"
    )
    assert check_args.main(["--allow-missing", "export/later.py", "--commands-file", str(cmds)]) == 0
    out = capsys.readouterr().out
    assert "4 command(s): 3 parse, 1 skipped (missing), 0 failed" in out
    with open(cmds, "a") as f:
        f.write("python3 -m zipformer_pc.decoding.decode --exp-dir e --bpe-model b --test-sets t=x --beam-size four\n")
    assert check_args.main(["--allow-missing", "export/later.py", "--commands-file", str(cmds)]) == 1
    cap = capsys.readouterr()
    assert "argument --beam-size: invalid int value: 'four'" in cap.out
    assert "1 failed: line 7: zipformer_pc.decoding.decode" in cap.err


# ------------------------------------------------------ LibriSpeech dry run


def dry_run(tmp_path, *args):
    exp = tmp_path / "exp"
    r = run(["bash", "egs/librispeech/run.sh", "--dry-run", "true", "--exp-dir", str(exp), *args])
    assert not exp.exists(), "a dry run must not write anything"
    return r, [line[len("[dry-run] "):] for line in r.stdout.splitlines() if line.startswith("[dry-run] ")]


def test_librispeech_dry_run_lists_and_checks_every_command(tmp_path):
    r, cmds = dry_run(tmp_path)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    exp = tmp_path / "exp"
    train = [c for c in cmds if c.startswith("python3 -m zipformer_pc.training.train ")]
    decode = [c for c in cmds if c.startswith("python3 -m zipformer_pc.decoding.decode ")]
    export = [c for c in cmds if c.startswith("python3 -m zipformer_pc.export ")]
    # 7 Table I + 4 fixed subsets + 4 random per-batch splits + 2 alpha values
    assert len(train) == 7 + 4 + 4 + 2
    trained = sorted(re.search(r"--exp-dir (\S+)", c).group(1).rsplit("/", 1)[1] for c in train)
    assert len(set(trained)) == 17
    for c in train:
        for opt in ("--encoder paper", "--world-size 4", "--dtype fp16", "--num-epochs 40",
                    "--max-duration 1000", "--bpe-model data/librispeech/lang_bpe_500/bpe.model",
                    "--valid-cuts data/librispeech/fbank/librispeech_cuts_dev-clean.jsonl.gz",
                    # icefall's 960 h sampler and its MUSAN mixing
                    "--num-buckets 30", "--bucket-buffer-size 210000",
                    "--musan-cuts data/musan/musan_cuts.jsonl.gz"):
            assert opt in c, (opt, c)
    auto = [c for c in train if "--use-auto-punct true" in c]
    assert len(auto) == 3 and all("librispeech_cuts_train_pauto_p1.jsonl.gz" in c for c in auto)
    assert sorted(re.search(r"--model-type (\S+)", c).group(1) for c in auto) == ["conditioned", "punct", "two-decoder"]
    for f in ("0.5", "0.35", "0.2", "0.05"):
        fixed = [c for c in train if f"librispeech_cuts_train_p{f}.jsonl.gz" in c]
        rand = [c for c in train if f"--punct-proportion {f}" in c]
        assert len(fixed) == 1 and "--punct-proportion" not in fixed[0]
        assert len(rand) == 1 and "librispeech_cuts_train_p1.jsonl.gz" in rand[0]
    assert sum("--alpha 0.3" in c for c in train) == 1 and sum("--alpha 0.7" in c for c in train) == 1
    # every system x (greedy, modified beam search), plus the cascade of norm with both
    assert len(decode) == 17 * 2 + 2
    cascade = [c for c in decode if "--restore-model data/librispeech/restore/p1/restore.onnx" in c]
    assert len(cascade) == 2 and all(f"--exp-dir {exp}/norm " in c for c in cascade)
    assert sum("--decoding-method modified_beam_search" in c for c in decode) == 18
    for c in decode:
        for opt in ("--epoch 40", "--avg 15", "--chunk-size 32", "--left-context-frames 128",
                    "test-clean=data/librispeech/fbank/librispeech_cuts_test-clean.jsonl.gz"):
            assert opt in c, (opt, c)
    assert len(export) == 17 and all("--int8 true" in c for c in export)
    rtf = [c for c in cmds if "scoring/measure_rtf.py" in c]
    assert len(rtf) == 1 and rtf[0].count("--system ") == 4
    assert "--num-threads 1,2 " in rtf[0] and "--int8 false,true " in rtf[0]
    assert f"--system cascade={exp}/norm/onnx:data/librispeech/restore/p1/restore.onnx " in rtf[0]
    assert sum("scoring/make_results.py" in c for c in cmds) == 1
    assert sum("scoring/whisper_score.py" in c for c in cmds) == 2
    prep = [c for c in cmds if "prepare.sh" in c]
    assert len(prep) == 1 and "--dataset librispeech" in prep[0] and "--vocab-size 500" in prep[0]
    assert prep[0].endswith("--musan true")
    assert len(cmds) == 75
    assert "75 command(s): 75 parse" in r.stdout


@pytest.mark.parametrize(
    "args, message",
    [
        (["--stage", "1", "--stop-stage", "1", "--systems", "cond_p", "--train-extra", "--no-such-flag 1"],
         "zipformer_pc.training.train: error: unrecognized arguments: --no-such-flag 1"),
        (["--stage", "4", "--stop-stage", "4", "--systems", "norm", "--whisper-model", "",
          "--decode-extra", "--chunk-size abc"],
         "argument --chunk-size: invalid int value: 'abc'"),
    ],
)
def test_librispeech_dry_run_fails_on_a_bad_argument(tmp_path, args, message):
    r, _ = dry_run(tmp_path, *args)
    assert r.returncode == 1
    assert message in r.stdout
    assert "dry run FAILED" in r.stderr


@pytest.mark.parametrize("args, dtype", [(["--dtype", "bf16"], "bf16"), (["--use-fp16", "false"], "fp32"),
                                         (["--use-fp16", "true", "--dtype", "fp16"], "fp16")])
def test_librispeech_dry_run_passes_the_training_precision(tmp_path, args, dtype):
    r, cmds = dry_run(tmp_path, "--stage", "3", "--stop-stage", "3", *args)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert cmds and all(f"--dtype {dtype} " in c and "--use-fp16" not in c for c in cmds)


def test_librispeech_dry_run_refuses_contradicting_precisions(tmp_path):
    r, _ = dry_run(tmp_path, "--use-fp16", "true", "--dtype", "bf16")
    assert r.returncode == 2 and "--use-fp16 true contradicts --dtype bf16" in r.stderr


def test_librispeech_dry_run_stage_range(tmp_path):
    r, cmds = dry_run(tmp_path, "--stage", "2", "--stop-stage", "2")
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert len(cmds) == 8 and all(c.startswith("python3 -m zipformer_pc.training.train ") for c in cmds)
    assert all(re.search(r"--exp-dir \S+/cond_(p|rand)0\.[0-9]+ ", c) for c in cmds)
    r, _ = dry_run(tmp_path, "--stage", "3", "--stop-stage", "1")
    assert r.returncode == 2 and "--stage (3) is after --stop-stage (1)" in r.stderr


def test_recipes_pass_the_prepare_options_they_do_not_take_through_to_it(tmp_path, check_args, capsys):
    """tools/parse_options.sh with pass_to=prepare.sh: an option of prepare.sh the recipe does not declare
    goes to its stage 0; one the recipe gives prepare.sh itself is refused, and so is an option neither has."""
    r, cmds = dry_run(tmp_path, "--stage", "0", "--stop-stage", "0", "--musan-url", "file:///m.tar.gz")
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert len(cmds) == 1 and cmds[0].startswith("./prepare.sh --dataset librispeech ")
    assert cmds[0].endswith("--musan true --musan-url file:///m.tar.gz")
    r, _ = dry_run(tmp_path, "--dataset", "synth")
    assert r.returncode == 2 and "--dataset is not passed through to prepare.sh" in r.stderr
    r, _ = dry_run(tmp_path, "--voice-sets", "wide")
    assert r.returncode == 2 and "unknown option --voice-sets" in r.stderr
    # tools/check_args.py reads them the same way
    assert check_args.main(["egs/synth/pretrain.sh", "--voice-set", "wide", "--gcide-hours", "3", "--models", "norm"]) == 0
    assert check_args.main(["egs/custom/run.sh", "--custom-dir", "x"]) == 0
    assert check_args.main(["egs/synth/run.sh", "--pass-to", "x"]) == 2
    assert "unknown option --pass-to" in capsys.readouterr().err


# --------------------------------------------------------- whisper_score


def write_two_cuts(tmp_path: Path) -> Path:
    """Two cuts with audio (16 kHz and 8 kHz) and both references."""
    import soundfile as sf
    from lhotse import CutSet, Recording, SupervisionSegment

    rng = np.random.default_rng(0)
    cuts = []
    for uid, rate, seconds, n, p in [
        ("utt-a", 16000, 1.0, "hello world how are you", "Hello world, how are you?"),
        ("utt-b", 8000, 0.5, "it is fine", "It is fine."),
    ]:
        wav = tmp_path / f"{uid}.wav"
        sf.write(wav, (0.1 * rng.standard_normal(int(rate * seconds))).astype(np.float32), rate)
        rec = Recording.from_file(wav, recording_id=uid)
        cut = rec.to_cut()
        cut.supervisions = [SupervisionSegment(id=uid, recording_id=uid, start=0.0, duration=rec.duration,
                                               text=n, custom={"text_p": p})]
        cuts.append(cut)
    path = tmp_path / "tiny_cuts_test.jsonl.gz"
    CutSet.from_cuts(cuts).to_file(path)
    return path


# what "Whisper" says: marks P does not keep (!), a capital after it, a contraction
FAKE_OUTPUT = {16000: "Hello world! How are you?", 8000: " It's fine."}


def test_whisper_score_scores_with_the_project_text_and_metrics(tmp_path, monkeypatch):
    ws = load_script("scoring/whisper_score.py")
    cuts = write_two_cuts(tmp_path)
    seen = []

    def fake_transcribe(audio):
        assert audio.dtype == np.float32 and audio.ndim == 1
        seen.append(len(audio))
        return FAKE_OUTPUT[len(audio)]  # both cuts reach 16 kHz: 1 s and 0.5 s resampled from 8 kHz

    monkeypatch.setattr(ws, "load_transcriber", lambda args: fake_transcribe)
    out = tmp_path / "out"
    assert ws.main(["--cuts", str(cuts), "--model", "base", "--output-dir", str(out)]) == 0
    assert sorted(seen) == [8000, 16000]
    tag = "test-P-whisper-base"
    assert (out / f"recogs-{tag}.txt").read_text() == "utt-a\tHello world How are you?\nutt-b\tIt's fine.\n"
    assert (out / "recogs-test-N-whisper-base.txt").read_text() == "utt-a\thello world how are you\nutt-b\tit's fine\n"
    assert (out / "refs-test-P.txt").read_text() == "utt-a\tHello world, how are you?\nutt-b\tIt is fine.\n"
    n = json.loads((out / "wer-summary-test-N-whisper-base.json").read_text())
    p = json.loads((out / f"wer-summary-{tag}.json").read_text())
    # N: "it is fine" -> "it's fine" is 2 errors of 8 words
    assert n["wer"] == pytest.approx(25.0)
    # P: the comma is lost (1 of 3 marks), "How" is 1 case error of 2 capitalized words,
    # PC-WER: comma + How + it's/It is (2) = 4 errors of 8 words + 3 marks
    assert p["punc_er"] == pytest.approx(100 / 3)
    assert p["case_er"] == pytest.approx(50.0)
    assert p["pc_wer"] == pytest.approx(400 / 11)
    assert p["num_utts"] == 2 and p["rtf"] is not None
    table = (out / "results-test-whisper-base.md").read_text()
    assert "| test | 25.00 | 33.33 | 50.00 | 36.36 |" in table


def test_whisper_score_rescores_an_earlier_run_against_new_references(tmp_path, monkeypatch):
    """--rescore: Whisper's text of the earlier run (raw-TEST-TAG.txt) scored against the manifest's
    references as they are now, without a transcriber; a mode left without references loses its files."""
    ws = load_script("scoring/whisper_score.py")
    cuts = write_two_cuts(tmp_path)
    monkeypatch.setattr(ws, "load_transcriber", lambda args: lambda audio: FAKE_OUTPUT[len(audio)])
    out = tmp_path / "out"
    assert ws.main(["--cuts", str(cuts), "--output-dir", str(out)]) == 0
    rtf = json.loads((out / "wer-summary-test-N-whisper-base.json").read_text())["rtf"]
    # the references change: utt-b is now "it is fine now" and neither cut has a P reference
    from lhotse import CutSet, SupervisionSegment, load_manifest

    changed = []
    for cut in load_manifest(cuts):
        sup = cut.supervisions[0]
        cut.supervisions = [SupervisionSegment(id=sup.id, recording_id=sup.recording_id, start=0.0,
                                               duration=sup.duration, text=sup.text + (" now" if sup.id == "utt-b"
                                                                                      else ""))]
        changed.append(cut)
    CutSet.from_cuts(changed).to_file(cuts)

    def no_whisper(args):
        raise AssertionError("--rescore must not load Whisper")

    monkeypatch.setattr(ws, "load_transcriber", no_whisper)
    assert ws.main(["--cuts", str(cuts), "--output-dir", str(out), "--rescore", "true"]) == 0
    n = json.loads((out / "wer-summary-test-N-whisper-base.json").read_text())
    assert n["wer"] == pytest.approx(300 / 9) and n["rtf"] == rtf  # it's fine / it is fine now: 3 of 9
    assert not list(out.glob("*-test-P-*")) and not (out / "refs-test-P.txt").exists()
    assert (out / "raw-test-whisper-base.txt").read_text() == "utt-a\tHello world! How are you?\nutt-b\tIt's fine.\n"
    # an utterance the earlier run did not transcribe: a clear error, nothing rewritten
    (out / "raw-test-whisper-base.txt").write_text("utt-a\tHello world! How are you?\n")
    assert ws.main(["--cuts", str(cuts), "--output-dir", str(out), "--rescore", "true"]) == 2
    assert ws.main(["--cuts", str(cuts), "--output-dir", str(tmp_path / "none"), "--rescore", "true"]) == 2


def test_whisper_score_reuses_a_store_of_the_same_audio_and_transcribes_other_audio(tmp_path, monkeypatch, caplog):
    """--reuse DIR: Whisper's text of an earlier run (TAG-TEST.tsv, written beside every run) is scored
    without Whisper when it holds every utterance with the same audio digest, search and language, its
    RTF the stored run's; other audio, another beam or a missing utterance make Whisper run."""
    import logging

    import soundfile as sf

    ws = load_script("scoring/whisper_score.py")
    cuts = write_two_cuts(tmp_path)
    calls = []

    def fake(audio):
        calls.append(len(audio))
        return FAKE_OUTPUT[len(audio)]

    monkeypatch.setattr(ws, "load_transcriber", lambda args: fake)
    # --backend auto picks faster-whisper where tools/setup_env.sh --whisper installed a model: not here
    monkeypatch.setenv("ZPC_WHISPER_DIR", str(tmp_path / "no-ct2-models"))
    first = tmp_path / "first"
    assert ws.main(["--cuts", str(cuts), "--output-dir", str(first)]) == 0
    stored = first / "whisper-base-test.tsv"
    header, rows = ws.read_store(stored)
    assert header["beam_size"] == "5" and header["language"] == "en" and float(header["rtf"]) >= 0
    assert {u: t for u, (_, t) in rows.items()} == {"utt-a": "Hello world! How are you?", "utt-b": "It's fine."}
    store = tmp_path / "store"
    store.mkdir()
    (store / stored.name).write_text(stored.read_text())
    summary = json.loads((first / "wer-summary-test-N-whisper-base.json").read_text())

    def unavailable(args):
        raise ws.WhisperUnavailable(ws.EXIT_NO_PACKAGE, "no Whisper here (simulated)")

    monkeypatch.setattr(ws, "load_transcriber", unavailable)
    again = tmp_path / "again"
    assert ws.main(["--cuts", str(cuts), "--output-dir", str(again), "--reuse", str(store)]) == 0
    reused = json.loads((again / "wer-summary-test-N-whisper-base.json").read_text())
    assert reused["wer"] == summary["wer"] and reused["rtf"] == pytest.approx(float(header["rtf"]))
    # the RTF keeps the machine it was measured on, and the summary says where the text came from
    assert summary["text_from"] == "transcribed" and summary["rtf_machine"] == header["machine"]
    assert reused["text_from"] == "store/whisper-base-test.tsv" and reused["rtf_machine"] == header["machine"]
    # how Whisper ran goes into every summary (the reports' setup_note), the stored run's when reused
    for run in (summary, reused):
        assert [str(run[k]) for k in ("backend", "beam_size", "threads")] == ["openai-whisper", "5", "1"]
    from zipformer_pc.whisper import setup_note
    assert setup_note([summary]) == setup_note([reused]) == "openai-whisper (beam 5, one thread)"
    assert ws.read_store(again / stored.name) == (header, rows)  # the store is written on as it was read
    assert ws.main(["--cuts", str(cuts), "--output-dir", str(tmp_path / "one"), "--reuse", str(store),
                    "--max-utterances", "1"]) == 0  # a part of the stored set
    # another search, or other audio under the same id: Whisper is needed (here: not installed, exit 3)
    caplog.set_level(logging.INFO)
    assert ws.main(["--cuts", str(cuts), "--output-dir", str(tmp_path / "b1"), "--reuse", str(store),
                    "--beam-size", "1"]) == ws.EXIT_NO_PACKAGE
    assert "made with beam_size 5, this run's is 1" in caplog.text
    wav = tmp_path / "utt-b.wav"
    sf.write(wav, 0.5 * sf.read(wav, dtype="float32")[0], 8000)
    monkeypatch.setattr(ws, "load_transcriber", lambda args: fake)
    calls.clear()
    assert ws.main(["--cuts", str(cuts), "--output-dir", str(tmp_path / "new"), "--reuse", str(store)]) == 0
    assert "1 utterances have other audio (e.g. utt-b)" in caplog.text and sorted(calls) == [8000, 16000]
    assert ws.read_store(tmp_path / "new" / stored.name)[1]["utt-b"][0] != rows["utt-b"][0]
    (store / stored.name).write_text("\n".join(stored.read_text().splitlines()[:-1]) + "\n")  # utt-b dropped
    calls.clear()
    assert ws.main(["--cuts", str(cuts), "--output-dir", str(tmp_path / "new"), "--reuse", str(store)]) == 0
    assert "lacks 1 of the 2 utterances" in caplog.text and len(calls) == 2
    assert ws.main(["--cuts", str(cuts), "--output-dir", str(tmp_path / "x"), "--reuse", str(tmp_path / "no")]) == 2


def test_the_committed_whisper_store_holds_whole_sets_of_one_model_and_search():
    """scoring/whisper_store/: Whisper base's text of test, test_ood (seed 42) and test_real, as
    --reuse reads it: every row an utterance with its audio digest, one header per file."""
    ws = load_script("scoring/whisper_score.py")
    sizes = {}
    for path in sorted((ROOT / "scoring" / "whisper_store").glob("*.tsv")):
        header, rows = ws.read_store(path)
        assert set(header) == set(ws.STORE_KEYS), path
        assert (header["backend"], header["model"], header["beam_size"], header["language"]) == \
            ("faster-whisper", "base", "5", "en"), path
        assert 0 < float(header["rtf"]) < 1, path
        assert all(re.fullmatch(r"[0-9a-f]{16}", d) for d, _ in rows.values()), path
        assert len(rows) == len(path.read_text().splitlines()) - len(ws.STORE_KEYS), path  # no id twice
        sizes[path.name] = len(rows)
    assert sizes == {"whisper-base-test.tsv": 300, "whisper-base-test_ood.tsv": 300,
                     "whisper-base-test_real.tsv": 1291}


def fake_whisper_pkg(tmp_path: Path, body: str) -> dict:
    pkg = tmp_path / "fakepkgs" / "whisper"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(body)
    # no CTranslate2 model where --backend auto looks (tools/setup_env.sh --whisper may have put one in the venv)
    return {"PYTHONPATH": str(pkg.parent), "XDG_CACHE_HOME": str(tmp_path / "cache"),
            "ZPC_WHISPER_DIR": str(tmp_path / "no-ct2-models")}


def whisper_cmd(tmp_path, cuts, *extra):
    return [PY, "scoring/whisper_score.py", "--cuts", str(cuts), "--output-dir", str(tmp_path / "out"), *extra]


def test_whisper_score_without_the_package(tmp_path):
    cuts = tmp_path / "c.jsonl.gz"
    cuts.write_text("")
    env = fake_whisper_pkg(tmp_path, 'raise ImportError("No module named whisper (simulated)")\n')
    r = run(whisper_cmd(tmp_path, cuts, "--model", "small.en"), env=env)
    assert r.returncode == 3
    assert "openai-whisper package cannot be imported" in r.stderr
    assert "pip install openai-whisper" in r.stderr and "put small.en.pt in ~/.cache/whisper/" in r.stderr
    assert "Traceback" not in r.stderr
    assert not (tmp_path / "out").exists()


NO_DOWNLOAD_WHISPER = '''
_MODELS = {"base": "https://example.invalid/ed3a0b/base.pt", "tiny": "https://example.invalid/65147/tiny.pt"}


def load_model(name, device=None, download_root=None):
    import json, os
    with open(os.environ["FAKE_WHISPER_LOG"], "w") as f:
        json.dump({"name": name, "device": device, "download_root": download_root}, f)

    class Model:
        def transcribe(self, audio, **options):
            return {"text": " Hello world! How are you?" if len(audio) > 12000 else "It's fine."}

    return Model()
'''


def test_whisper_score_without_weights_never_downloads(tmp_path):
    cuts = write_two_cuts(tmp_path)
    env = fake_whisper_pkg(tmp_path, NO_DOWNLOAD_WHISPER)
    env["FAKE_WHISPER_LOG"] = str(tmp_path / "load_model.json")
    r = run(whisper_cmd(tmp_path, cuts, "--model", "base"), env=env)
    assert r.returncode == 4
    assert f"{tmp_path}/cache/whisper/base.pt does not exist" in r.stderr
    assert "--allow-download true" in r.stderr and "pip install openai-whisper" in r.stderr
    assert "Traceback" not in r.stderr
    assert not (tmp_path / "load_model.json").exists()  # whisper.load_model was never asked
    r = run(whisper_cmd(tmp_path, cuts, "--model", str(tmp_path / "nowhere" / "medium.pt")), env=env)
    assert r.returncode == 4 and "nowhere/medium.pt does not exist" in r.stderr

    # weights in the cache: loaded by their path (so whisper cannot download), then scored
    (tmp_path / "cache" / "whisper").mkdir(parents=True)
    (tmp_path / "cache" / "whisper" / "base.pt").write_bytes(b"weights")
    r = run(whisper_cmd(tmp_path, cuts, "--model", "base", "--test-name", "tiny"), env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    loaded = json.loads((tmp_path / "load_model.json").read_text())
    assert loaded["name"] == f"{tmp_path}/cache/whisper/base.pt" and loaded["device"] == "cpu"
    assert (tmp_path / "out" / "recogs-tiny-P-whisper-base.txt").read_text().startswith("utt-a\tHello world How")
    assert "| tiny | 25.00 | 33.33 | 50.00 | 36.36 |" in r.stdout


FAKE_FASTER_WHISPER = """
import json, os
class Seg:
    def __init__(self, text): self.text = text
class WhisperModel:
    def __init__(self, path, device, compute_type, cpu_threads, local_files_only):
        json.dump({"path": path, "device": device, "compute": compute_type, "threads": cpu_threads,
                   "local": local_files_only}, open(os.environ["FAKE_WHISPER_LOG"], "w"))
    def transcribe(self, audio, language, task, beam_size, condition_on_previous_text, vad_filter):
        words = {16000: [" Hello world!", " How are you?"], 8000: [" It's fine."]}[len(audio)]
        return iter(Seg(w) for w in words), None
"""


def test_whisper_score_runs_faster_whisper_on_a_local_ctranslate2_model(tmp_path):
    """--model base finds the CTranslate2 conversion that setup_env.sh --whisper joins into the
    share folder, runs it with faster-whisper (never downloading), and scores its segments'
    text with our normalization; the model's folder name is its tag."""
    cuts = write_two_cuts(tmp_path)
    pkg = tmp_path / "fakepkgs" / "faster_whisper"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(FAKE_FASTER_WHISPER)
    share = tmp_path / "share"
    (share / "base").mkdir(parents=True)
    (share / "base" / "model.bin").write_bytes(b"ct2")
    env = {"PYTHONPATH": str(pkg.parent), "ZPC_WHISPER_DIR": str(share), "FAKE_WHISPER_LOG": str(tmp_path / "l.json")}
    r = run(whisper_cmd(tmp_path, cuts, "--model", "base", "--test-name", "tiny", "--num-threads", "2"), env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    loaded = json.loads((tmp_path / "l.json").read_text())
    assert loaded == {"path": str(share / "base"), "device": "cpu", "compute": "int8", "threads": 2, "local": True}
    assert (tmp_path / "out" / "recogs-tiny-P-whisper-base.txt").read_text().startswith("utt-a\tHello world How")
    assert "| tiny | 25.00 | 33.33 | 50.00 | 36.36 |" in r.stdout
    # a folder given as --model: tagged by its name
    r = run(whisper_cmd(tmp_path, cuts, "--model", str(share / "base") + "/", "--test-name", "t2"), env=env)
    assert r.returncode == 0 and (tmp_path / "out" / "results-t2-whisper-base.md").is_file(), r.stderr[-2000:]
    # asked for, but no model there: a clear error, exit 4
    r = run(whisper_cmd(tmp_path, cuts, "--model", "small", "--backend", "faster-whisper"), env=env)
    assert r.returncode == 4 and "no CTranslate2 model directory for 'small'" in r.stderr and "Traceback" not in r.stderr


def test_whisper_score_has_get_parser():
    ws = load_script("scoring/whisper_score.py")
    args = ws.get_parser().parse_args(["--cuts", "c", "--output-dir", "o"])
    assert args.model == "base" and args.allow_download is False


# ------------------------------------------------------------ publish_pretrained: lineage of a model


OLD_CARD = """# Pretrained models

Decoded and published by `pretrain.sh` (commit abc1234; the LMs came later).

## Training

* **norm**: 1564 batches, 100 min of training; weights: iter-1564-avg-3.
  The norm model continued from the previously published `norm.pt` (commit 9dcfef7: 3713 batches).
* **conditioned**: 4166 batches, 250 min of training; weights: iter-4166-avg-3.

The conditioned model continued from `/x/exp_mix/conditioned/checkpoint-3770.pt` (written by hand).
"""


def test_model_card_cuts_the_weights_lineage_at_the_start_weights():
    pub = load_script("egs/synth/publish_pretrained.py")
    start = "0.5 x the run's iter-9-avg-1 (mean of batches 5..9) + 0.5 x the weights it started from (p/c.pt: " \
            "0.7 x the run's iter-4-avg-1 (mean of batches 1..4) + 0.3 x the weights it started from (p/c.pt: " \
            "mean of batches 1..2))"
    how = f"0.7 x the run's iter-20-avg-1 (mean of batches 11..20) + 0.3 x the weights it started from (p/c.pt: {start})"
    assert pub.cut_lineage(how) == ("0.7 x the run's iter-20-avg-1 (mean of batches 11..20) + 0.3 x the weights it "
                                    "started from (p/c.pt)")
    assert pub.cut_lineage(start) == ("0.5 x the run's iter-9-avg-1 (mean of batches 5..9) + 0.5 x the weights it "
                                      "started from (p/c.pt)")
    plain = "mean of the weights after each of batches 1024..2112"
    assert pub.cut_lineage(plain) == plain


def test_model_card_names_where_each_model_started(tmp_path):
    torch = pytest.importorskip("torch")
    pub = load_script("egs/synth/publish_pretrained.py")
    assert pub.card_commit(OLD_CARD) == "abc1234" and pub.card_commit("no header") == ""
    # a run that continued the published norm model: the earlier card describes that model
    note = pub.start_note("norm", "egs/synth/pretrained/norm.pt", OLD_CARD)
    assert "previously published norm model" in note and "commit abc1234" in note
    assert "That model: 1564 batches" in note
    # one model back: the models before it are in the earlier card, named by its commit, not copied in
    assert "9dcfef7" not in note and "(its header names commit abc1234)" in note
    assert "(`git log -p -- egs/synth/pretrained/MODEL_CARD.md`)" in note
    assert pub.card_beside(str(pub.ROOT / "egs/synth/pretrained/norm.pt")) == "egs/synth/pretrained/MODEL_CARD.md"
    # republishing a later point of the same run keeps the earlier card's note (hand-written details)
    assert pub.start_note("norm", "egs/synth/pretrained/norm.pt", OLD_CARD, same_run=True) == \
        "The norm model continued from the previously published `norm.pt` (commit 9dcfef7: 3713 batches)."
    assert "(written by hand)" in pub.start_note("conditioned", "/x/exp_mix/conditioned/checkpoint-3770.pt",
                                                 OLD_CARD, same_run=True)
    assert pub.start_note("conditioned", "/x/exp_mix/conditioned/checkpoint-3770.pt", OLD_CARD).startswith(
        "The conditioned model continued from `/x/exp_mix/conditioned/checkpoint-3770.pt` (the weights of another")
    assert "started from the norm model" in pub.start_note("conditioned", "/e/norm/checkpoint-9.pt", "")
    assert pub.start_note("norm", "", "") == "The norm model was trained from scratch."
    # whether the shipped weights came from this run: a checkpoint at their batch count
    out, exp = tmp_path / "out", tmp_path / "exp"
    out.mkdir(), exp.mkdir()
    assert not pub.published_from(out, "norm", exp)
    torch.save({"model": {}, "batch_idx_train": 1564}, out / "norm.pt")
    assert not pub.published_from(out, "norm", exp)
    (exp / "checkpoint-1564.pt").write_bytes(b"")
    assert pub.published_from(out, "norm", exp)


def test_the_size_budget_counts_megabytes_of_a_million_bytes(tmp_path):
    """--max-mb is decimal: 1,020,000 bytes are over 1 MB (they would be 0.97 MiB); the card aside."""
    pub = load_script("egs/synth/publish_pretrained.py")
    staging = tmp_path / "staging"
    staging.mkdir()
    (staging / "encoder.onnx").write_bytes(b"\0" * 1_000_000)
    (staging / "MODEL_CARD.md").write_bytes(b"\0" * 500_000)
    assert pub.staged_mb(staging, 1.0) == pytest.approx(1.0)
    (staging / "tokens.txt").write_bytes(b"\0" * 20_000)
    with pytest.raises(SystemExit, match=r"1.02 MB \(of 10\^6 bytes\), more than --max-mb 1.0"):
        pub.staged_mb(staging, 1.0)
    assert not staging.exists()  # the refused staging is removed, the published files untouched


def test_a_model_kept_twice_keeps_the_corpus_its_training_read():
    """The corpus line of a model published unchanged names the card of the corpus it trained on: the
    earlier card's own commit the first time, the commit that card's line names ever after."""
    pub = load_script("egs/synth/publish_pretrained.py")
    card = OLD_CARD + "\n| norm | test set | WER (N) |\n|---|---|---|\n| | test | 8.37 |\n"
    assert pub.kept_card_lines(card, "norm").source == "commit abc1234"
    card += "\n* the norm model was trained on the corpus of the earlier card (commit 9dcfef7), not necessarily this one\n"
    kept = pub.kept_card_lines(card, "norm")
    assert kept.source == "commit 9dcfef7" and kept.training[0].startswith("* **norm**: 1564 batches")
    with pytest.raises(SystemExit, match="no training bullet or metric table of conditioned"):
        pub.kept_card_lines(card, "conditioned")


def test_the_card_says_where_whisper_rtf_was_measured_and_whose_text_was_reused(tmp_path):
    """The card's Whisper rows: the RTF is the transcribing run's, so the note names its machine, and a
    set whose text came from the store (``--reuse``) is named; a summary without them says so."""
    from zipformer_pc.layout import result_name, whisper_suffix

    pub = load_script("egs/synth/publish_pretrained.py")
    for test, rtf, source in (("test", 0.151, "whisper_store/whisper-base-test.tsv"), ("test_real", 0.25, "transcribed")):
        for mode in ("N", "P"):
            summary = {"wer": 19.97, "pc_wer": 23.92, "punc_er": 1.0, "case_er": 2.0, "per": 3.0, "rtf": rtf,
                       "rtf_machine": "Xeon, 2 cores", "text_from": source, "backend": "faster-whisper",
                       "compute": "int8", "beam_size": "5", "threads": "1" if test == "test" else "2"}
            (tmp_path / result_name("wer-summary", test, mode, whisper_suffix("base"))).write_text(json.dumps(summary))
    lines = pub.whisper_section(tmp_path)
    assert "| test | 19.97 | 23.92 | 1.00 | 2.00 | 3.00 | 0.151 |" in lines
    assert "| test_real | 19.97 | 23.92 | 1.00 | 2.00 | 3.00 | 0.250 |" in lines
    assert not any("test_ood" in line for line in lines)  # not run: no row
    note = next(line for line in lines if line.startswith("Whisper's RTF as measured"))
    assert "on Xeon, 2 cores." in note and "`whisper_store/whisper-base-test.tsv`" in note and "test_real" not in note
    assert "this CPU" not in "\n".join(lines)
    assert "(not recorded)" in pub.rtf_note([{"rtf": 0.3}])
    # how it ran, from the summaries: two runs that differ are both named
    assert ("run by faster-whisper (int8, beam 5, one thread); faster-whisper (int8, beam 5, 2 threads) "
            "(installed by `tools/setup_env.sh --whisper`), its text") in "\n".join(lines)
    assert pub.setup_note([{"rtf": 0.3}]) == "a Whisper back end (its settings not recorded)"
    assert pub.setup_note([{"backend": "openai-whisper", "compute": "cpu", "beam_size": "0", "threads": "1"}]) == \
        "openai-whisper (cpu, greedy search, one thread)"
    # a fresh run's summary holds numbers: greedy search is beam 0
    assert pub.setup_note([{"backend": "faster-whisper", "compute": None, "beam_size": 0, "threads": 1}]) == \
        "faster-whisper (greedy search, one thread)"
    assert pub.whisper_section(tmp_path / "none") == []


def test_the_card_describes_the_corpus_the_model_trained_on_and_the_people_in_it(tmp_path):
    """The Data section reads the conditioned model's own --train-cuts (a join of corpora, with its
    stats.md), counts the hours of each speaker and names those that are no TTS voice as people."""
    import gzip

    pub = load_script("egs/synth/publish_pretrained.py")
    join = tmp_path / "try4"
    (join / "fbank").mkdir(parents=True)
    (join / "stats.md").write_text("| manifest | utts |\n")
    cuts = join / "fbank" / "synth_cuts_train_p1.jsonl.gz"
    rows = [("g-fotaq-1", "fotaq", 3600.0), ("g-bass-1", "bass", 1800.0), ("s-1", "espk-us-m6", 1800.0),
            ("k-1", "kokmix-003", 360.0)]
    with gzip.open(cuts, "wt") as f:
        for uid, speaker, seconds in rows:
            f.write(json.dumps({"id": uid, "supervisions": [{"id": uid, "speaker": speaker, "duration": seconds}]})
                    + "\n")
    data = tmp_path / "data"
    assert pub.training_corpus(str(cuts), data) == (cuts, join / "stats.md")
    # the manifest is not on this machine: the data dir's corpus describes it
    assert pub.training_corpus(str(tmp_path / "gone.jsonl.gz"), data) == \
        (data / "fbank" / "synth_cuts_train.jsonl.gz", data / "stats.md")
    hours = pub.speaker_hours(cuts)
    assert hours == pytest.approx({"fotaq": 1.0, "bass": 0.5, "espk-us-m6": 0.5, "kokmix-003": 0.1})
    assert pub.is_tts_voice("espk-us-m6") and pub.is_tts_voice("kokmix-003") and not pub.is_tts_voice("fotaq")
    assert pub.people_line(hours).startswith("* people's speech in it: 1.5 h of its 2.1 h (bass 0.5 h, fotaq 1.0 h;")
    assert pub.people_line({"espk-us-m6": 2.0}) == ""  # synthetic speech only


def _runtime_json(path: Path, method: str, questions: bool, per: float) -> None:
    path.write_text(json.dumps({"rtf": 0.05, "search": {"decoding_method": method, "lms": ["N", "P"] if method !=
                                                        "greedy_search" else [], "questions": questions,
                                                        "blank_penalty": 1.0, "beam": 4, "lm_scale": 0.6,
                                                        "lm_token_bonus": 0.5, "lodr_scale": 0.25},
                                "scores": {"N": {"wer": 99.01}, "P": {"pc_wer": 99.02, "punc_er": 99.03,
                                                                      "case_er": 99.04, "per": per}}}))


def test_text_models_republish_keeps_the_weights_and_rewrites_only_their_lines(tmp_path):
    """``publish_pretrained.py --text-models-only`` on the shipped card: new LMs and question model,
    the runtime table measured again; the files and every other line of the card as they were."""
    import gzip
    pub = load_script("egs/synth/publish_pretrained.py")
    out, exp = tmp_path / "pretrained", tmp_path / "exp"
    onnx = exp / "conditioned" / "onnx"
    out.mkdir(), onnx.mkdir(parents=True)
    card = (ROOT / "egs/synth/pretrained/MODEL_CARD.md").read_text()
    (out / "MODEL_CARD.md").write_text(card)
    for name, data in [("encoder-x.onnx", b"enc"), ("joiner-P-x.onnx", b"joi"), ("tokens.txt", b"<blk> 0\n"),
                       ("conditioned.pt", b"w"), ("lm-P.arpa.gz", b"old lm"), ("questions.json.gz", b"old q")]:
        (out / name).write_bytes(data)
        if name.endswith((".onnx", ".txt")):
            (onnx / name).write_bytes(data)
    (onnx / "lm-P.arpa.gz").write_bytes(b"new lm")
    (onnx / "lodr-P.arpa.gz").write_bytes(b"bigram")
    (onnx / "questions.json.gz").write_bytes(gzip.compress(json.dumps({"version": 2}).encode()))
    args = ["--exp-dir", str(exp), "--data-dir", str(tmp_path), "--out-dir", str(out), "--text-hours", "40",
            "--command", "pretrain.sh --stage 4 --text-models-only true", "--text-models-only", "true",
            "--lm-gcide-hours", "100"]

    def republish():
        pub.republish_text_models(pub.get_parser().parse_args(args))

    with pytest.raises(SystemExit, match="runtime was not run"):  # no runtime figures yet
        republish()
    for run, method, q in [("greedy_search", "greedy_search", True), ("modified_beam_search", "modified_beam_search",
                                                                          True),
                           ("modified_beam_search-noq", "modified_beam_search", False)]:
        for t, per in [("test", 88.01 if q else 88.02), ("test_ood", 88.03)]:  # none is the card's
            _runtime_json(exp / "conditioned" / f"runtime-{run}-{t}.json", method, q, per)
    (onnx / "encoder-x.onnx").write_bytes(b"another model")
    with pytest.raises(SystemExit, match="is not the shipped"):  # the figures would not be the shipped files'
        republish()
    (onnx / "encoder-x.onnx").write_bytes(b"enc")
    republish()
    assert (out / "lm-P.arpa.gz").read_bytes() == b"new lm" and (out / "encoder-x.onnx").read_bytes() == b"enc"
    assert (out / "lodr-P.arpa.gz").read_bytes() == b"bigram"
    assert (out / "conditioned.pt").read_bytes() == b"w" and not (tmp_path / "pretrained.new").exists()
    new = (out / "MODEL_CARD.md").read_text()
    note = [x for x in new.splitlines() if x.startswith(pub.TEXT_NOTE)]
    assert len(note) == 1 and "question model version 2" in note[0] and "40 h corpus" in note[0]

    def table(text):
        lines = text.splitlines()
        a, b = pub.runtime_block(lines)
        return pub.runtime_rows(lines[a:b])

    old = table(card)["`test` modified_beam_search + LMs + question model"]
    assert (f"`test` modified_beam_search + LMs + question model: WER {old[0]} -> 99.01, PC-WER {old[1]} -> 99.02, "
            f"PuncER {old[2]} -> 99.03, CaseER {old[3]} -> 99.04, PER {old[4]} -> 88.01;") in note[0]
    rows = table(new)
    assert len(rows) == 6 and rows["`test_ood` greedy_search + question model"] == \
        ["99.01", "99.02", "99.03", "99.04", "88.03"]
    assert "questions.json.gz` | the question model" in new and "trained on the training text of a 40 h" in new
    assert "N also of ~100 h of the text of Webster's" in new and "; the N LM also on ~100 h of GCIDE text;" in note[0]
    assert "* The token LMs know Austen's text (P) and Austen's and the dictionary's (N)" in new
    lodr_rows = [x for x in new.splitlines() if x.startswith(pub.LODR_ROW)]
    assert len(lodr_rows) == 1 and "token bigrams" in lodr_rows[0] and "of the training text of a 40 h" in lodr_rows[0]
    assert ("fuses `lm-P.arpa.gz` / `lm-N.arpa.gz` with `--lm-scale 0.6 --lm-token-bonus 0.5`, less `--lodr-scale "
            "0.25` times the log probability of the LODR bigrams") in new
    assert re.search(r"^Total 0\.0 MB\.$", new, re.M)

    def rest(text):  # the lines a text-model republication leaves alone
        lines = text.splitlines()
        a, b = pub.runtime_block(lines)
        lines = lines[:a] + lines[b:]
        lines = [x for i, x in enumerate(lines) if not (x.startswith(pub.TEXT_NOTE) or lines[i + 1:i + 2] and
                                                        lines[i + 1].startswith(pub.TEXT_NOTE))]
        return [x for x in lines if not x.startswith(("| `lm-P", "| `questions", "Total ", pub.LM_LIMIT, pub.LODR_ROW))]

    assert rest(new) == rest(card) and len(new.splitlines()) == len(card.splitlines()) + 2 - \
        (pub.TEXT_NOTE in card) * 2 + (pub.LODR_ROW not in card)
    # a second republication replaces the note, it does not add one (the text models made "before" the
    # runtime runs, as stage 4 makes them)
    os.utime(onnx / "questions.json.gz", (1, 1))
    os.utime(onnx / "lm-P.arpa.gz", (1, 1))
    (onnx / "lodr-P.arpa.gz").unlink()  # the bigrams shipped before stay, and so does their row
    republish()
    again = (out / "MODEL_CARD.md").read_text()
    assert len([x for x in again.splitlines() if x.startswith(pub.TEXT_NOTE)]) == 1
    assert len([x for x in again.splitlines() if x.startswith(pub.LODR_ROW)]) == 1
    assert (out / "lodr-P.arpa.gz").read_bytes() == b"bigram"
    assert rest(again) == rest(new) and "PER 88.01 -> 88.01" not in again and "unchanged" in again


def test_model_card_lists_the_schedule_changes_of_the_training_logs(tmp_path):
    pub = load_script("egs/synth/publish_pretrained.py")
    (tmp_path / "log").mkdir()
    # two runs of one model: a resumption with a new --base-lr, then a cut by the plateau rule
    (tmp_path / "log" / "log-train-a-0").write_text(
        "2026-11-26 00:00:00,000 INFO [train.py rank 0] Resuming from batch 1814 (epoch 1)\n"
        "2026-11-26 00:00:00,000 INFO [train.py rank 0] Resuming with a new schedule: --base-lr 0.03 -> 0.012\n")
    (tmp_path / "log" / "log-train-b-0").write_text(
        "2026-11-26 01:00:00,000 INFO [train.py rank 0] Plateau at batch 2535: validation loss 65.100, not "
        "below the best 64.900 by 0.01 in 3 validation(s): learning rate x0.4 (scale 0.4, lr 4.70e-03)\n")
    story = pub.training_story(tmp_path, {"base_lr": 0.012, "lr_plateau_factor": 0.4, "lr_plateau_patience": 3})
    assert story == ["  options: `--base-lr 0.012 --lr-plateau-factor 0.4 --lr-plateau-patience 3`",
                     "  at batch 1814: --base-lr 0.03 -> 0.012",
                     "  at batch 2535: learning rate x0.4 on a validation plateau (to 4.70e-03)"]
    # a cool-down is named when the run had one
    cooled = pub.training_story(tmp_path, {"base_lr": 0.045, "lr_cooldown_batches": 0, "lr_cooldown_minutes": 80.0})
    assert cooled[0] == "  options: `--base-lr 0.045 --lr-cooldown-minutes 80.0`"
