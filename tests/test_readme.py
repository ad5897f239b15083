"""The README's promises: its examples run, and CI runs its test command."""

import doctest
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def test_readme_python_examples_hold():
    blocks = re.findall(r"```python\n(.*?)```", README, flags=re.S)
    assert blocks, "README has no python example"
    parser = doctest.DocTestParser()
    runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE)
    for i, block in enumerate(blocks):
        test = parser.get_doctest(block, {}, f"README block {i}", "README.md", 0)
        runner.run(test)
    assert runner.failures == 0


def test_readme_has_exactly_two_setup_commands_and_ci_runs_the_test_one():
    section = README.split("## Set up and run", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", section, flags=re.S).group(1)
    commands = [ln.split("#")[0].strip() for ln in block.splitlines() if ln.split("#")[0].strip()]
    assert commands == ["bash run.sh", "bash test.sh"]
    ci = (ROOT / ".ci" / "run").read_text()
    assert re.search(r"^bash test\.sh\b", ci, flags=re.M)


def test_readme_metric_example_matches_the_scorer():
    from zipformer_pc.metrics import score_corpus

    s = score_corpus(
        [("u", "Hello Bob, how are you? Fine, thanks.", "hello Bob. how are you? fine thanks")]
    ).summary()
    expected = {"wer": "0.00", "wer_c": "28.57", "wer_p": "27.27", "pc_wer": "45.45",
                "punc_er": "75.00", "case_er": "66.67", "per": "75.00"}
    for key, shown in expected.items():
        assert f"{s[key]:.2f}" == shown, key
        assert shown in README


def test_readme_commands_name_files_and_modules_that_exist():
    """Every script a command of the README (or of the training logs it points to) runs exists, and every
    ``python -m`` module can be found."""
    import importlib.util

    docs = README + "".join((ROOT / "egs" / "synth" / f).read_text(encoding="utf-8")
                            for f in ("TEST_OOD.md", "PRETRAIN_LOG.md"))
    commands = [ln for block in re.findall(r"```bash\n(.*?)```", docs, flags=re.S) for ln in block.splitlines()]
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
