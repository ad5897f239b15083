"""zipformer_pc.layout: the experiment directory's names built and parsed in one place, the names
already on disk (the shipped models, RESULTS.md) recognised, the command line the recipes ask,
and one streaming geometry for the export, the decoding and the recipes."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from zipformer_pc import layout
from zipformer_pc.layout import (DEFAULT_CHUNK_SIZE, DEFAULT_LEFT_CONTEXT_FRAMES, FULL_CONTEXT, CheckpointTag,
                                 checkpoint_tag, decode_suffix, export_file_names, export_tag, onnx_file_name,
                                 parse_checkpoint_tag, parse_decode_suffix, parse_export_name, parse_result_name,
                                 parse_run_name, parse_streaming_suffix, parse_table_name, result_glob, result_name,
                                 run_name, run_names, streaming_suffix, table_name)

ROOT = Path(__file__).resolve().parents[2]
PRETRAINED = ROOT / "egs" / "synth" / "pretrained"


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "zipformer_pc.layout", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)


def test_the_default_geometry_is_the_streaming_model_s():
    assert (DEFAULT_CHUNK_SIZE, DEFAULT_LEFT_CONTEXT_FRAMES) == (32, 128) == layout.default_geometry()
    assert DEFAULT_LEFT_CONTEXT_FRAMES % DEFAULT_CHUNK_SIZE == 0  # the encoder's rule (_check_chunk)


@pytest.mark.parametrize("kwargs,text", [
    ({"iteration": 6311, "avg": 1}, "iter-6311-avg-1"),
    ({"epoch": 40, "avg": 15}, "epoch-40-avg-15"),
    ({"epoch": 3, "iteration": 800, "avg": 2}, "iter-800-avg-2"),  # --iter wins, as in decoding and export
    ({"epoch": 40, "avg": 15, "mark_averaged": True}, "epoch-40-avg-15-use-averaged-model"),
])
def test_checkpoint_tags_round_trip(kwargs, text):
    assert checkpoint_tag(**kwargs) == text
    tag = parse_checkpoint_tag(text)
    assert str(tag) == text and tag.marked == kwargs.get("mark_averaged", False)
    assert tag == CheckpointTag("iter" if kwargs.get("iteration") else "epoch",
                                kwargs.get("iteration") or kwargs["epoch"], kwargs["avg"], tag.marked)


@pytest.mark.parametrize("bad", ["iter-6311", "epoch-x-avg-1", "iter-1-avg-1-chunk-32-left-128", "", "seed-1-avg-1"])
def test_what_is_not_a_checkpoint_tag_is_refused(bad):
    with pytest.raises(ValueError):
        parse_checkpoint_tag(bad)
    with pytest.raises(ValueError):
        checkpoint_tag(avg=1)  # neither --iter nor --epoch
    with pytest.raises(ValueError):
        checkpoint_tag(iteration=5, avg=0)


def test_streaming_suffix_and_full_context():
    assert streaming_suffix() == "chunk-32-left-128"
    assert streaming_suffix(16, 64) == "chunk-16-left-64"
    assert streaming_suffix(FULL_CONTEXT, FULL_CONTEXT) == "" == streaming_suffix(-1, 128)
    for chunk, left in ((32, 128), (16, 64), (64, 0)):
        assert parse_streaming_suffix(streaming_suffix(chunk, left)) == (chunk, left)
    assert parse_streaming_suffix("") == (FULL_CONTEXT, FULL_CONTEXT)
    with pytest.raises(ValueError):
        parse_streaming_suffix("chunk-32")
    with pytest.raises(ValueError):
        export_tag("iter-1-avg-1", -1, -1)  # the export is streaming only


def test_export_names_round_trip():
    tag = export_tag("iter-6311-avg-1")
    assert tag == "iter-6311-avg-1-chunk-32-left-128"
    names = export_file_names(tag, int8=True)
    assert names == {"encoder": "encoder-iter-6311-avg-1-chunk-32-left-128.int8.onnx",
                     "decoder-N": "decoder-N-iter-6311-avg-1-chunk-32-left-128.int8.onnx",
                     "joiner-N": "joiner-N-iter-6311-avg-1-chunk-32-left-128.int8.onnx",
                     "decoder-P": "decoder-P-iter-6311-avg-1-chunk-32-left-128.int8.onnx",
                     "joiner-P": "joiner-P-iter-6311-avg-1-chunk-32-left-128.int8.onnx"}
    for int8 in (False, True):
        for role, name in export_file_names(export_tag("epoch-40-avg-15", 16, 64), int8=int8).items():
            e = parse_export_name(name)
            assert e.name == name and e.int8 == int8 and (e.chunk_size, e.left_context_frames) == (16, 64)
            assert e.tag == "epoch-40-avg-15" and e.role == role.split("-")[0]
            assert e.mode == (None if role == "encoder" else role.split("-")[1])
    assert onnx_file_name("encoder") == "encoder.onnx"  # a random model's export has no tag
    assert layout.int8_name("decoder-P.onnx") == "decoder-P.int8.onnx"
    for bad in ("encoder-P-iter-1-avg-1-chunk-32-left-128.onnx", "decoder-iter-1-avg-1-chunk-32-left-128.onnx",
                "encoder-iter-1-avg-1.onnx", "tokens.txt"):
        with pytest.raises(ValueError):
            parse_export_name(bad)
    with pytest.raises(ValueError):
        onnx_file_name("decoder")


def test_the_shipped_models_are_recognised():
    """Every ONNX file of egs/synth/pretrained parses, and the layout builds exactly these names back."""
    onnx = sorted(p.name for p in PRETRAINED.glob("*.onnx"))
    assert onnx, f"no shipped ONNX models in {PRETRAINED}"
    parsed = [parse_export_name(n) for n in onnx]
    assert {p.name for p in parsed} == set(onnx)
    shipped = {(p.tag, p.chunk_size, p.left_context_frames) for p in parsed}
    assert len(shipped) == 1, shipped  # one model, one export
    (weights, chunk, left), = shipped
    assert re.fullmatch(r"iter-\d+-avg-\d+", weights) and (chunk, left) == (DEFAULT_CHUNK_SIZE, DEFAULT_LEFT_CONTEXT_FRAMES)
    tag = export_tag(parsed[0].tag)
    built = set(export_file_names(tag).values()) | set(export_file_names(tag, int8=True).values())
    assert built == set(onnx)
    assert f"decoder-N-{weights}-chunk-32-left-128.int8.onnx" in onnx


def test_the_committed_results_name_their_weights_by_a_tag():
    text = (ROOT / "egs" / "synth" / "RESULTS.md").read_text()
    tags = re.findall(r"decoded with the weights `([^`]+)`", text)
    assert tags and all(str(parse_checkpoint_tag(t)) == t for t in tags)


def old_decode_suffix(method, desc, beam_size=4, lms=False, lm_scale=0.5, lm_token_bonus=1.0, lodr_scale=0.0,
                      max_sym_per_frame=1, blank_penalty=1.0, chunk_size=-1, left_context_frames=-1,
                      streaming=False, cascade=False, questions=False):
    """decode.py's suffix as it was written before zipformer_pc.layout (its names must not change)."""
    suffix = f"{method}-{desc}"
    if method == "modified_beam_search":
        suffix += f"-beam-{beam_size}"
        if lms:
            suffix += f"-lm-{lm_scale:g}-bonus-{lm_token_bonus:g}"
            if lodr_scale > 0:
                suffix += f"-lodr-{lodr_scale:g}"
    elif max_sym_per_frame != 1:
        suffix += f"-max-sym-{max_sym_per_frame}"
    if blank_penalty != 1.0:
        suffix += f"-blank-penalty-{blank_penalty:g}"
    if chunk_size > 0:
        suffix += f"-chunk-{chunk_size}-left-{left_context_frames}"
    return suffix + "-streaming" * streaming + "-cascade" * cascade + "-questions" * questions


DECODINGS = [
    dict(method="greedy_search", desc="iter-800-avg-2", chunk_size=32, left_context_frames=128),
    dict(method="greedy_search", desc="epoch-2-avg-1", chunk_size=32, left_context_frames=64, streaming=True),
    dict(method="greedy_search", desc="epoch-40-avg-15", max_sym_per_frame=3, blank_penalty=0.0),
    dict(method="greedy_search", desc="iter-1500-avg-3", chunk_size=32, left_context_frames=128, cascade=True),
    dict(method="greedy_search", desc="iter-6311-avg-1", questions=True, blank_penalty=1.5),
    dict(method="modified_beam_search", desc="iter-6311-avg-1", chunk_size=32, left_context_frames=128),
    dict(method="modified_beam_search", desc="epoch-3-avg-1", beam_size=2, lms=True, lm_scale=0.6,
         lm_token_bonus=-0.5, lodr_scale=0.25, blank_penalty=-1.0, chunk_size=16, left_context_frames=-1,
         streaming=True, cascade=True, questions=True),
    dict(method="modified_beam_search", desc="epoch-3-avg-1", lms=True, lm_scale=1e-05, lm_token_bonus=2.0,
         max_sym_per_frame=4),
]


@pytest.mark.parametrize("d", DECODINGS)
def test_decode_suffixes_are_decode_py_s_names_and_round_trip(d):
    args = dict(d)
    method, desc, lms = args.pop("method"), args.pop("desc"), args.pop("lms", False)
    penalty = args.pop("blank_penalty", 1.0)
    lm_scale = args.pop("lm_scale", 0.5)
    args.setdefault("chunk_size", FULL_CONTEXT)  # as the old code's arguments, not decode.py's new defaults
    args.setdefault("left_context_frames", FULL_CONTEXT)
    got = decode_suffix(method, desc, lm_scale=lm_scale if lms else None, blank_penalty=None if penalty == 1.0
                        else penalty, **args)
    assert str(got) == old_decode_suffix(**d)
    back = parse_decode_suffix(str(got))
    assert back == got and str(back) == str(got) and back.checkpoint == parse_checkpoint_tag(desc)
    for kind in ("recogs", "errs", "wer-summary"):
        for test in ("test", "test_ood", "test-clean", "dev-N-x"):
            name = result_name(kind, test, "P", got)
            r = parse_result_name(name)
            assert (r.kind, r.test, r.mode, r.suffix, r.decode) == (kind, test, "P", str(got), got)
            assert r.name == name
            assert Path(name).match(result_glob(kind, test, "P")) and Path(name).match(result_glob(kind))
    assert parse_table_name(table_name(got)) == got
    assert Path(table_name(got)).match(result_glob("results"))


def test_result_names_of_other_writers():
    """Whisper's files (scoring/whisper_score.py) share the kinds; their suffix is no decoding's."""
    suffix = layout.whisper_suffix("base")
    name = result_name("wer-summary", "test_real", "N", suffix)
    assert name == "wer-summary-test_real-N-whisper-base.json"
    r = parse_result_name(name)
    assert (r.test, r.mode, r.suffix, r.decode) == ("test_real", "N", "whisper-base", None)
    assert table_name(suffix, "test") == "results-test-whisper-base.md"
    assert parse_result_name("refs-test-N.txt") is None and parse_result_name("recogs-test.txt") is None
    assert parse_table_name("results-test-whisper-base.md") is None
    with pytest.raises(ValueError):
        result_name("recogs", "test", "X", suffix)


def test_run_names():
    assert run_name("cond_p", 42, 42) == "cond_p" and run_name("cond_p", 43, 42) == "cond_p-seed43"
    assert run_names("cond_p0.2", 42, 3) == ["cond_p0.2", "cond_p0.2-seed43", "cond_p0.2-seed44"]
    assert parse_run_name("cond_p0.2-seed43") == ("cond_p0.2", 43) and parse_run_name("cond_p") == ("cond_p", None)


def test_the_command_line_prints_what_the_recipes_expect():
    expect = {
        ("geometry",): "32 128",
        ("tag", "--iter", "6311", "--avg", "1"): "iter-6311-avg-1",
        ("tag", "--epoch", "40", "--avg", "15"): "epoch-40-avg-15",
        ("suffix",): "chunk-32-left-128",
        ("suffix", "--chunk", "-1"): "",
        ("export-tag", "--tag", "iter-800-avg-2"): "iter-800-avg-2-chunk-32-left-128",
        ("export-name", "--iter", "6311", "--avg", "1", "--role", "decoder-N", "--int8"):
            "decoder-N-iter-6311-avg-1-chunk-32-left-128.int8.onnx",
        ("export-name", "--tag", "iter-800-avg-2", "--chunk", "16", "--left", "128"):
            "encoder-iter-800-avg-2-chunk-16-left-128.onnx",
        ("result-name", "--kind", "wer-summary", "--test", "test", "--mode", "N", "--suffix", "whisper-base"):
            "wer-summary-test-N-whisper-base.json",
        ("run-name", "cond_p", "43", "--base-seed", "42"): "cond_p-seed43",
        ("run-name", "cond_p", "42", "--base-seed", "42"): "cond_p",
    }
    for args, out in expect.items():
        r = cli(*args)
        assert r.returncode == 0 and r.stdout == out + "\n", (args, r.stdout, r.stderr)
    r = cli("parse", "joiner-P-iter-6311-avg-1-chunk-32-left-128.onnx")
    assert r.returncode == 0 and '"what": "export"' in r.stdout and '"mode": "P"' in r.stdout
    for bad in (("tag", "--avg", "1"), ("export-tag", "--tag", "iter-1-avg-1", "--chunk", "-1"), ("tag", "--tag", "x")):
        r = cli(*bad)
        assert r.returncode == 2 and "zipformer_pc.layout" in r.stderr and not r.stdout, bad


def test_bash_reads_the_geometry_as_the_recipes_do():
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    r = subprocess.run(["bash", "-c", 'set -euo pipefail; read -r chunk left < <(python3 -m zipformer_pc.layout '
                        'geometry); echo "$chunk/$left"'], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0 and r.stdout == "32/128\n", r.stderr


def test_the_recipes_type_no_geometry_or_tag_of_their_own():
    for recipe in ("egs/synth/run.sh", "egs/synth/pretrain.sh", "egs/librispeech/run.sh", "egs/custom/run.sh"):
        code = "\n".join(line for line in (ROOT / recipe).read_text().splitlines() if not line.lstrip().startswith("#"))
        # they ask zipformer_pc.layout, directly or through tools/recipe.sh's read_geometry / layout
        assert re.search(r"zipformer_pc\.layout|^\s*read_geometry\b|\$\(layout ", code, flags=re.M), recipe
        for pattern in (r"^\s*(chunk|left|chunk_size|left_context_frames)=\d", r"-avg-\$", r"-chunk-\$",
                        r"-seed\$", r"whisper-base\.json"):
            assert not re.search(pattern, code, flags=re.M), (recipe, pattern)


def test_the_recipe_skeleton_asks_the_layout():
    code = (ROOT / "tools" / "recipe.sh").read_text()
    assert re.search(r"^layout\(\) \{ python3 -m zipformer_pc\.layout ", code, flags=re.M)
    assert re.search(r"^read_geometry\(\) \{.*layout geometry", code, flags=re.M)


def test_decoding_defaults_to_the_export_s_geometry():
    from zipformer_pc.decoding.decode import get_parser as decode_parser
    from zipformer_pc.export.onnx_export import get_parser as export_parser

    dec = decode_parser().parse_args(["--exp-dir", "e", "--bpe-model", "b", "--test-sets", "t=x"])
    exp = export_parser().parse_args(["--exp-dir", "e", "--tokens", "t"])
    assert (dec.chunk_size, dec.left_context_frames) == (exp.chunk_size, exp.left_context_frames) == (
        DEFAULT_CHUNK_SIZE, DEFAULT_LEFT_CONTEXT_FRAMES)
    full = decode_parser().parse_args(["--exp-dir", "e", "--bpe-model", "b", "--test-sets", "t=x", "--chunk-size", "-1"])
    assert full.chunk_size == FULL_CONTEXT  # full context only when asked
