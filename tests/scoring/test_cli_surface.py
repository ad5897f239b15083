"""The command-line surface: one ``python -m zipformer_pc.VERB`` and one ``zpc-VERB`` console script per
command users run, the option groups the command lines share (which checkpoint, the search, ``--modes``),
the one ``--modes`` syntax, and decode.py's ``--model-dir`` finding a model directory's extras as the
runtime does."""

import argparse
import importlib
import subprocess
import sys

import pytest
from conftest import ROOT, script_module

from zipformer_pc.options import parse_modes_option

VERBS = ("transcribe", "serve", "train", "decode", "export", "score", "results")
PRETRAINED = ROOT / "egs" / "synth" / "pretrained"


def verb_module(verb: str):
    """The module ``python -m zipformer_pc.VERB`` runs (a package's ``__main__``)."""
    return importlib.import_module("zipformer_pc.export.__main__" if verb == "export" else f"zipformer_pc.{verb}")


@pytest.mark.parametrize("verb", VERBS)
def test_every_verb_runs_as_a_module(verb):
    r = subprocess.run([sys.executable, "-m", f"zipformer_pc.{verb}", "--help"], cwd=ROOT, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.startswith("usage:")


def test_every_verb_is_a_console_script_calling_its_module():
    tomllib = pytest.importorskip("tomllib")
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["scripts"]
    for verb in VERBS:
        target = scripts.get(f"zpc-{verb}")
        assert target is not None, f"zpc-{verb} is not declared"
        module, _, func = target.partition(":")
        mod = verb_module(verb)
        assert module == mod.__name__ and func == "main", target
        assert callable(mod.main) and isinstance(mod.get_parser(), argparse.ArgumentParser)
    # the package lists the scoring code it now holds
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    assert "zipformer_pc.scoring" in setuptools["packages"]


def test_the_older_scoring_paths_still_run():
    for script in ("scoring/score.py", "scoring/make_results.py"):
        r = subprocess.run([sys.executable, script, "--help"], cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0 and r.stdout.startswith("usage:"), (script, r.stderr[-2000:])
    assert not (ROOT / "export").exists(), "the top-level export/ folder is gone: python -m zipformer_pc.export"


# ---------------------------------------------------------------- --modes


@pytest.mark.parametrize("spec, expected", [
    ("P,N", ("P", "N")), ("N,P", ("N", "P")), ("N", ("N",)), ("P", ("P",)), (" p , n ", ("P", "N")),
    ("", None), ("all", None), ("ALL", None), ("both", None),
])
def test_modes_one_syntax_and_its_aliases(spec, expected):
    assert parse_modes_option(spec) == expected


@pytest.mark.parametrize("junk, why", [
    ("X", "unknown mode 'X'"), ("P,X", "unknown mode 'X'"), ("P;N", "unknown mode 'P;N'"), ("P,", "unknown mode ''"),
    ("P,P", "a mode named twice"),
])
def test_modes_junk_is_refused_with_the_syntax(junk, why):
    with pytest.raises(ValueError) as e:
        parse_modes_option(junk)
    assert why in str(e.value) and "comma list of P and N in any order" in str(e.value)


def parsers():
    """The command lines that take --modes, each with the arguments it requires."""
    from zipformer_pc.decoding import decode
    from zipformer_pc.runtime import cli
    from zipformer_pc.server import __main__ as server

    measure_rtf = script_module("scoring/measure_rtf.py")
    return {
        "decode": (decode.get_parser(), ["--exp-dir", "e", "--test-sets", "t=x"]),
        "transcribe": (cli.get_parser(), ["--model-dir", "d"]),
        "serve": (server.get_parser(), ["--model-dir", "d"]),
        "measure_rtf": (measure_rtf.get_parser(), ["--cuts", "c"]),
    }


def test_every_command_line_parses_modes_alike(capsys):
    for name, (parser, required) in parsers().items():
        assert parser.parse_args(required).modes is None, name  # the default: every mode the model has
        assert parser.parse_args(required + ["--modes", "N,P"]).modes == ("N", "P"), name
        assert parser.parse_args(required + ["--modes", "both"]).modes is None, name
        with pytest.raises(SystemExit) as e:
            parser.parse_args(required + ["--modes", "Q"])
        assert e.value.code == 2
        assert "argument --modes: unknown mode 'Q'" in capsys.readouterr().err, name


def test_measure_rtf_keeps_both_and_single_mode():
    measure_rtf = script_module("scoring/measure_rtf.py")
    args = measure_rtf.get_parser().parse_args(["--cuts", "c", "--modes", "both", "--single-mode", "N"])
    assert args.modes is None and args.single_mode == "N"
    assert measure_rtf.modes_to_search(["P", "N"], False, args.modes) == ["P", "N"]
    assert measure_rtf.modes_to_search(["P", "N"], False, ("N",)) == ["N"]
    assert measure_rtf.modes_to_search(["P", "N"], False, ("N", "P")) == ["N", "P"]
    assert measure_rtf.modes_to_search(["P"], False, ("N",)) == ["P"]  # a single-mode model searches its mode
    assert measure_rtf.modes_to_search(["P", "N"], True, ("P",)) == ["N"]  # a cascade searches N


# ------------------------------------------------------- shared option groups


def test_decode_and_export_share_the_checkpoint_options():
    from zipformer_pc.decoding import decode
    from zipformer_pc.export import onnx_export

    argv = ["--exp-dir", "e", "--iter", "6311", "--avg", "2", "--use-averaged-model", "false"]
    a = decode.get_parser().parse_args(argv + ["--test-sets", "t=x"])
    b = onnx_export.get_parser().parse_args(argv + ["--tokens", "t"])
    for k in ("exp_dir", "epoch", "iter", "avg", "use_averaged_model"):
        assert getattr(a, k) == getattr(b, k), k
    assert (a.iter, a.avg, a.use_averaged_model, a.epoch) == (6311, 2, False, 0)


def test_decode_transcribe_and_measure_rtf_share_the_search_options():
    argv = ["--decoding-method", "modified_beam_search", "--beam-size", "8", "--lm-scale", "0.3",
            "--lm-token-bonus", "0.7", "--lodr-scale", "0.1", "--blank-penalty", "0.5", "--questions", "false"]
    got = {}
    for name, (parser, required) in parsers().items():
        a = parser.parse_args(required + argv)
        got[name] = (a.decoding_method, a.beam_size, a.lm_scale, a.lm_token_bonus, a.lodr_scale, a.blank_penalty,
                     a.questions)
    assert set(got.values()) == {("modified_beam_search", 8, 0.3, 0.7, 0.1, 0.5, False)}, got


def test_inference_loading_needs_no_training_code():
    code = ("import sys, zipformer_pc.decoding.decode, zipformer_pc.export.onnx_export; "
            "print(sorted(m for m in sys.modules if m.startswith('zipformer_pc.training')))")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "[]", r.stdout + r.stderr[-2000:]
    from zipformer_pc.model import loading
    from zipformer_pc.training import checkpoint

    for name in ("load_model_for_inference", "averaged_weights", "load_checkpoint", "batch_checkpoints",
                 "average_between"):
        assert getattr(checkpoint, name) is getattr(loading, name), name  # the old imports keep working


# ------------------------------------------------ decode.py --model-dir


def decode_args(*extra):
    from zipformer_pc.decoding import decode

    return decode.get_parser().parse_args(["--exp-dir", "e", "--test-sets", "t=x", *extra])


def test_decode_takes_the_model_dirs_extras_as_the_runtime_does(tmp_path):
    from zipformer_pc.decoding.decode import fusion_lm_dir, question_model_path
    from zipformer_pc.lm import lm_files
    from zipformer_pc.runtime import find_model_files

    runtime = find_model_files(PRETRAINED)
    extras = {k: v for k, v in runtime.items() if k.startswith(("lm-", "lodr-"))}
    assert set(extras) == {"lm-P", "lm-N", "lodr-P", "lodr-N"} and "questions" in runtime

    beam = decode_args("--model-dir", str(PRETRAINED), "--decoding-method", "modified_beam_search")
    assert lm_files(fusion_lm_dir(beam), ["P", "N"]) == extras  # the LMs and LODR bigrams the runtime fuses
    assert question_model_path(beam) == (str(runtime["questions"]), False)
    # greedy search fuses no LM (as the runtime), but P still asks the question model
    greedy = decode_args("--model-dir", str(PRETRAINED))
    assert fusion_lm_dir(greedy) == "" and question_model_path(greedy) == (str(runtime["questions"]), False)
    # the explicit options override the model dir's
    assert question_model_path(decode_args("--model-dir", str(PRETRAINED), "--questions", "false")) == (None, False)
    own = tmp_path / "q.json.gz"
    assert question_model_path(decode_args("--model-dir", str(PRETRAINED), "--questions", str(own))) == (str(own), True)
    assert fusion_lm_dir(decode_args("--model-dir", str(PRETRAINED), "--lm-dir", str(tmp_path),
                                     "--decoding-method", "modified_beam_search")) == str(tmp_path)
    # without a model dir: nothing unless asked
    plain = decode_args("--decoding-method", "modified_beam_search")
    assert fusion_lm_dir(plain) == "" and question_model_path(plain) == (None, False)
