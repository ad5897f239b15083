"""The README's promises: it stays a short front door whose links, paths, modules and options
all exist, its examples run, and CI runs its test command.  The pages of docs/ it links to are
held to the same links, and their doctests and commands are checked too."""

import doctest
import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")
DOCS = {p: p.read_text(encoding="utf-8") for p in sorted((ROOT / "docs").glob("*.md"))}
MAX_README_LINES = 250
# Linked before they exist: written in parallel by other work.  Drop a name once its file is in.
PENDING: set = set()
# Paths that the commands write (ignored by git), not files of the repository.
OUTPUTS = ("egs/synth/exp", "egs/librispeech/exp")
REPO_DIRS = ("benchmarks", "docs", "egs", "export", "local", "research", "scoring", "tests", "tools", "zipformer_pc")


def code_blocks(text, lang=r"\w*"):
    return re.findall(rf"```{lang}\n(.*?)```", text, flags=re.S)


def command_lines(block):
    """The block's lines with continuations joined; comment lines dropped."""
    joined = re.sub(r"\\\n\s*", " ", block)
    return [ln.strip() for ln in joined.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]


def words(line):
    """A command line split as the shell would, its trailing comment dropped."""
    return shlex.split(line, comments=True)


def slug(heading):
    """GitHub's anchor of a markdown heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(text):
    without_code = re.sub(r"```.*?```", "", text, flags=re.S)
    return {slug(h) for h in re.findall(r"^#{1,6} (.+)$", without_code, flags=re.M)}


def test_readme_is_a_front_door_of_at_most_250_lines():
    assert len(README.splitlines()) <= MAX_README_LINES


def test_readme_and_docs_links_point_to_files_and_headings_that_exist():
    bad = []
    for page, text in [(ROOT / "README.md", README), *DOCS.items()]:
        for target in re.findall(r"\]\(([^)\s]+)\)", re.sub(r"```.*?```", "", text, flags=re.S)):
            if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
                continue
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            rel = os.path.relpath(dest, ROOT)
            if rel in PENDING and not dest.exists():
                continue
            if not dest.exists():
                bad.append(f"{page.name}: {target} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest.read_text(encoding="utf-8")):
                bad.append(f"{page.name}: {target} (no such heading)")
    assert not bad, bad


def test_readme_links_every_docs_page():
    linked = set(re.findall(r"\]\((docs/[\w.-]+\.md)", README))
    assert {f"docs/{p.name}" for p in DOCS} <= linked


def test_readme_names_no_figure_of_the_shipped_model_but_links_where_they_are():
    """Figures go stale with every published model: the README links the card and RESULTS.md."""
    assert "egs/synth/pretrained/MODEL_CARD.md" in README and "egs/synth/RESULTS.md" in README
    assert not re.search(r"\b(WER|PC-WER|PER|PuncER|CaseER)\b[^.\n]{0,20}\d+\.\d", README)


def test_python_doctests_of_readme_and_docs_hold():
    parser = doctest.DocTestParser()
    runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE)
    examples = 0
    for name, text in [("README.md", README), *((p.name, t) for p, t in DOCS.items())]:
        for i, block in enumerate(code_blocks(text, "python")):
            test = parser.get_doctest(block, {}, f"{name} block {i}", name, 0)
            examples += len(test.examples)
            runner.run(test)
    assert examples, "no doctest in the README or docs/"
    assert runner.failures == 0


def test_readme_has_exactly_two_setup_commands_and_ci_runs_the_test_one():
    section = README.split("## Set up and run", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", section, flags=re.S).group(1)
    commands = [ln.split("#")[0].strip() for ln in block.splitlines() if ln.split("#")[0].strip()]
    assert commands == ["bash run.sh", "bash test.sh"]
    ci = (ROOT / ".ci" / "run").read_text()
    assert re.search(r"^bash test\.sh\b", ci, flags=re.M)
    assert "tools/setup_env.sh" in (ROOT / "run.sh").read_text() and "tools/setup_env.sh" in (ROOT / "test.sh").read_text()


def test_the_metric_example_matches_the_scorer():
    from zipformer_pc.metrics import score_corpus

    page = DOCS[ROOT / "docs" / "metrics.md"]
    s = score_corpus(
        [("u", "Hello Bob, how are you? Fine, thanks.", "hello Bob. how are you? fine thanks")]
    ).summary()
    expected = {"wer": "0.00", "wer_c": "28.57", "wer_p": "27.27", "pc_wer": "45.45",
                "punc_er": "75.00", "case_er": "66.67", "per": "75.00"}
    for key, shown in expected.items():
        assert f"{s[key]:.2f}" == shown, key
        assert shown in page


def test_commands_name_files_and_modules_that_exist():
    """Every script a command of the README, of docs/ or of the training logs they point to runs
    exists, and every ``python -m`` module can be found."""
    docs = README + "".join(DOCS.values()) + "".join(
        (ROOT / "egs" / "synth" / f).read_text(encoding="utf-8") for f in ("TEST_OOD.md", "PRETRAIN_LOG.md"))
    commands = [ln for block in code_blocks(docs, "bash") for ln in block.splitlines()]
    commands += re.findall(r"`((?:python|bash) [^`]+)`", docs)
    scripts, modules = set(), set()
    for cmd in commands:
        scripts.update(re.findall(r"(?:python3?|bash)\s+(?:\./)?([\w./-]+\.(?:py|sh))", cmd))
        for mod, alternatives in re.findall(r"python3? -m ([\w.]+)(?:\{([\w,]+)\})?", cmd):
            modules.update([mod + a for a in alternatives.split(",")] if alternatives else [mod])
    scripts.update(re.findall(r"(?<![\w/])\./([\w-]+\.sh)", docs))
    assert scripts and modules
    assert not [s for s in sorted(scripts) if not (ROOT / s).is_file()]
    assert not [m for m in sorted(modules) if importlib.util.find_spec(m) is None]
    # the paths the layout table names
    layout = README.split("## Layout", 1)[1].split("\n## ", 1)[0]
    for path in re.findall(r"^\| `([\w./-]+)`", layout, flags=re.M):
        assert (ROOT / path).exists(), path


def test_readme_code_blocks_name_repository_paths_and_modules_that_exist():
    """Files, folders and modules the README's examples use are in the repository (the outputs
    they write aside)."""
    missing = []
    for block in code_blocks(README):
        for path in re.findall(rf"(?<![\w./~-])(?:\./)?((?:{'|'.join(REPO_DIRS)})/[\w./-]*[\w/]|[\w-]+\.(?:sh|py))\b",
                               block):
            if not path.startswith(OUTPUTS) and not (ROOT / path).exists():
                missing.append(path)
        for mod in re.findall(r"-m ([\w.]+)", block) + re.findall(r"^from ([\w.]+) import", block, flags=re.M):
            if mod.startswith("zipformer_pc") and importlib.util.find_spec(mod) is None:
                missing.append(mod)
    assert not missing, missing


def readme_commands():
    return [ln for block in code_blocks(README, "bash") for ln in command_lines(block)]


def test_readme_shell_commands_pass_only_options_their_scripts_take():
    """``bash X.sh --opt`` / ``./X.sh --opt``: each option is a variable the script sets before it
    reads its options (tools/parse_options.sh), or at least named in its text."""
    checked, bad = 0, []
    for line in readme_commands():
        argv = words(line)
        script = next((a for a in argv[:2] if a.endswith(".sh")), None)
        if script is None or script.endswith("test.sh"):  # test.sh passes its arguments to pytest
            continue
        script = script.removeprefix("./")
        # run.sh hands its arguments to the synthetic recipe
        target = ROOT / ("egs/synth/run.sh" if script == "run.sh" else script)
        text = target.read_text()
        for opt in (a[2:].split("=")[0] for a in argv if a.startswith("--")):
            checked += 1
            if not re.search(rf"^\s*{opt.replace('-', '_')}=", text, flags=re.M) and f"--{opt}" not in text:
                bad.append(f"{script} --{opt}")
    assert checked and not bad, bad


def test_readme_python_commands_parse(tmp_path):
    """Every ``python`` command of the README passes its script's argument parser
    (tools/check_args.py: argparse only, nothing runs)."""
    lines = []
    for line in readme_commands():
        argv = words(line)
        if argv and re.search(r"(^|/)python3?$", argv[0]):
            lines.append(shlex.join(argv))
    assert len(lines) >= 6
    cmds = tmp_path / "cmds.txt"
    cmds.write_text("\n".join(lines) + "\n")
    r = subprocess.run([sys.executable, "tools/check_args.py", "--commands-file", str(cmds)], cwd=ROOT,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr


def test_readme_python_examples_transcribe_the_quick_start_sentence(tmp_path):
    """The quick start's espeak-ng command makes hello.wav; each Python example of the README (our
    runtime, then sherpa-onnx) transcribes it with the shipped model and prints P (and N)."""
    from zipformer_pc.metrics import score_corpus
    from zipformer_pc.text import normalized

    if shutil.which("espeak-ng") is None:
        pytest.fail("espeak-ng is missing: tools/setup_env.sh installs it")
    quick = README.split("## Quick start", 1)[1]
    speak = next(ln for ln in command_lines(code_blocks(quick, "bash")[0]) if ln.startswith("espeak-ng"))
    argv = words(speak)
    subprocess.run(argv, cwd=tmp_path, check=True, capture_output=True, timeout=120)
    sentence = argv[-1]
    (tmp_path / "egs").symlink_to(ROOT / "egs")  # the examples name the model dir relative to the root
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    examples = [b for b in code_blocks(README, "python") if ">>>" not in b]
    assert len(examples) == 2
    for i, example in enumerate(examples):
        r = subprocess.run([sys.executable, "-c", example], cwd=tmp_path, env=env, capture_output=True,
                           text=True, timeout=300)
        assert r.returncode == 0, (i, r.stderr[-3000:])
        got = dict(ln.split(": ", 1) for ln in r.stdout.splitlines() if re.match(r"[PN]: ", ln))
        assert "P" in got, (i, r.stdout)
        wer = score_corpus([("hello", normalized(sentence), normalized(got["P"]))]).summary()["wer"]
        assert wer <= 25.0 and got["P"][:1].isupper() and re.search(r"[.?!]$", got["P"]), (i, got, wer)
        if "N" in got:
            assert got["N"] == got["N"].lower() and not re.search(r"[.,?!]", got["N"]), (i, got)
