"""The recipe's shell entry points parse options the icefall way and fail clearly."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run(*cmd, **kw):
    return subprocess.run(list(cmd), cwd=ROOT, capture_output=True, text=True, timeout=120, **kw)


def test_unknown_option_is_rejected_by_name():
    r = run("bash", "egs/synth/run.sh", "--no-such-option", "1")
    assert r.returncode == 2
    assert "unknown option --no-such-option" in r.stderr


def test_option_without_value_is_rejected():
    r = run("bash", "egs/synth/run.sh", "--stage")
    assert r.returncode == 2
    assert "needs a value" in r.stderr


def test_prepare_rejects_unknown_dataset():
    r = run("bash", "prepare.sh", "--dataset", "timit")
    assert r.returncode == 2
    assert "--dataset must be synth or librispeech" in r.stderr


def test_help_prints_usage():
    r = run("bash", "prepare.sh", "--help")
    assert r.returncode == 0
    assert "--stage N --stop-stage M" in r.stdout


def test_main_job_rejects_a_bad_quick_value():
    r = run("bash", "egs/synth/run.sh", "--quick", "maybe")
    assert r.returncode == 2
    assert "--quick must be true or false" in r.stderr


def test_prepare_rejects_unknown_size():
    r = run("bash", "prepare.sh", "--size", "huge")
    assert r.returncode == 2
    assert "--size must be default or tiny" in r.stderr


def test_normalize_text_cli_keeps_ids():
    r = run(sys.executable, "local/normalize_text.py", "--form", "N", "--has-ids", "true",
            input="utt-1\tHe said: \u201cDon\u2019t!\u201d Well-known?\n")
    assert r.returncode == 0, r.stderr
    assert r.stdout == "utt-1\the said don't well known\n"


def test_setup_env_stops_before_pip_when_the_disk_is_too_full(tmp_path):
    # a df that reports 1 GB free: the new venv is created, then setup stops with the reason
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "df").write_text("#!/bin/sh\necho 'Filesystem 1024-blocks Used Available Capacity Mounted'\n"
                             "echo '/dev/x 100000000 98951424 1048576 99% /'\n")
    (fake / "df").chmod(0o755)
    env = {"PATH": f"{fake}:/usr/bin:/bin", "ZPC_VENV": str(tmp_path / "venv"), "PYTHON": sys.executable,
           "HOME": str(tmp_path)}
    r = run("bash", "tools/setup_env.sh", "--no-apt", env=env)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "1 GB free where the venv goes" in r.stderr and "ZPC_VENV" in r.stderr
    assert "Installing Python packages" not in r.stdout
