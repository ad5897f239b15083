"""The recipe's shell entry points parse options the icefall way and fail clearly."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


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
    assert "--dataset must be synth, librispeech, real, custom or games" in r.stderr


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
    assert "1.0 GB free where the venv goes" in r.stderr and "ZPC_VENV" in r.stderr
    assert "Installing Python packages" not in r.stdout


def test_the_lock_pins_every_dependency_of_pyproject_within_its_range():
    # setup_env.sh installs tools/requirements.lock with --no-deps: a dependency added to
    # pyproject.toml (or a range moved) without regenerating the lock would go missing
    import tomllib
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = project["dependencies"] + [r for extra in ("dev", "voices") for r in project["optional-dependencies"][extra]]
    pinned = {}
    for line in (ROOT / "tools/requirements.lock").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, version = line.split("==")
            pinned[canonicalize_name(name)] = version
    for spec in wanted:
        req = Requirement(spec)
        version = pinned.get(canonicalize_name(req.name))
        assert version is not None, f"{req.name} is missing from tools/requirements.lock"
        assert req.specifier.contains(version, prereleases=True), f"{req.name}=={version} is outside {req.specifier}"
    assert pinned["torch"] == "2.14.1" and pinned["torchaudio"] == "2.11.0"
    assert "triton" not in pinned  # 0.9 GB the CPU never loads


def test_setup_env_tries_a_failed_dictionary_download_once(tmp_path):
    # apt-get fails (an offline machine): the first run says so and leaves a marker, the next
    # run does not try again (setup_env stays fast); a df of 1 GB stops both runs before pip
    if Path("/usr/share/dictd/gcide.dict.dz").is_file():
        pytest.skip("dict-gcide is installed here: setup_env has nothing to fetch")
    fake = tmp_path / "bin"
    fake.mkdir()
    calls = tmp_path / "apt-calls"
    scripts = {"apt-get": f"echo \"$*\" >> {calls}; exit 1",
               "dpkg-query": "echo 'install ok installed'",  # every Debian package present
               "sudo": '"$@"',
               "df": "echo 'Filesystem 1024-blocks Used Available Capacity Mounted'; "
                     "echo '/dev/x 100000000 98951424 1048576 99% /'"}
    for name, body in scripts.items():
        (fake / name).write_text(f"#!/bin/sh\n{body}\n")
        (fake / name).chmod(0o755)
    env = {"PATH": f"{fake}:/usr/bin:/bin", "ZPC_VENV": str(tmp_path / "venv"), "PYTHON": sys.executable,
           "HOME": str(tmp_path)}
    first = run("bash", "tools/setup_env.sh", env=env)
    assert first.returncode == 1 and "GB free where the venv goes" in first.stderr, first.stdout + first.stderr
    assert "Could not download dict-gcide" in first.stdout and "download-failed" in first.stdout
    assert (tmp_path / "venv/share/gcide/download-failed").is_file()
    tried = calls.read_text()
    assert "download" in tried
    second = run("bash", "tools/setup_env.sh", env=env)
    assert second.returncode == 1, second.stdout + second.stderr
    assert "dict-gcide" not in second.stdout and calls.read_text() == tried


EXTRA_VOICE_PACKAGES = ("libttspico-utils rhvoice rhvoice-english mbrola mbrola-us1 mbrola-us2 mbrola-us3 mbrola-en1 "
                        "festvox-rablpc16k festlex-oald festvox-don").split()


@pytest.mark.parametrize("apt_works", [True, False])
def test_setup_env_installs_the_extra_voices_with_sources_of_its_own(tmp_path, apt_works):
    # the extra voices are missing (everything else installed): apt-get runs with a source list
    # and package lists of setup_env's own (contrib and non-free added), never the system's; a
    # failure is logged, leaves a marker and is not retried
    if os.geteuid() != 0:
        pytest.skip("the extra voices are installed only as root (or with sudo)")
    fake = tmp_path / "bin"
    fake.mkdir()
    calls = tmp_path / "apt-calls"
    missing = "|".join(EXTRA_VOICE_PACKAGES)
    scripts = {"apt-get": f"echo \"$*\" >> {calls}; exit {0 if apt_works else 100}",
               "dpkg-query": f'case "$3" in {missing}) exit 1 ;; *) echo "install ok installed" ;; esac',
               "df": "echo 'Filesystem 1024-blocks Used Available Capacity Mounted'; "
                     "echo '/dev/x 100000000 98951424 1048576 99% /'"}
    for name, body in scripts.items():
        (fake / name).write_text(f"#!/bin/sh\n{body}\n")
        (fake / name).chmod(0o755)
    venv = tmp_path / "venv"
    (venv / "share/gcide").mkdir(parents=True)
    (venv / "share/gcide/download-failed").write_text("")  # no dictionary download in this test
    env = {"PATH": f"{fake}:/usr/bin:/bin", "ZPC_VENV": str(venv), "PYTHON": sys.executable, "HOME": str(tmp_path)}
    system_sources = {p: p.read_bytes() for p in Path("/etc/apt").rglob("*") if p.is_file()}
    first = run("bash", "tools/setup_env.sh", env=env)
    assert first.returncode == 1 and "GB free where the venv goes" in first.stderr, first.stdout + first.stderr
    lines = calls.read_text().splitlines()
    own = venv / "share/extra-voices/apt"
    opts = (f"-o Dir::Etc::SourceList=/dev/null -o Dir::Etc::SourceParts={own}/sources.list.d "
            f"-o Dir::State::Lists={own}/lists")
    assert lines[0].startswith(opts) and lines[0].endswith("update -qq")
    if apt_works:
        assert len(lines) == 2 and lines[1].startswith(opts)
        assert lines[1].endswith("install -y -qq --no-install-recommends " + " ".join(EXTRA_VOICE_PACKAGES))
        assert "Extra training voices installed" in first.stdout
    else:
        assert len(lines) == 1
        assert "Could not install the extra training voices" in first.stdout
        assert (venv / "share/extra-voices/install-failed").is_file()
        second = run("bash", "tools/setup_env.sh", env=env)
        assert second.returncode == 1 and calls.read_text().splitlines() == lines
    assert {p: p.read_bytes() for p in Path("/etc/apt").rglob("*") if p.is_file()} == system_sources
    debian = Path("/etc/apt/sources.list.d/debian.sources")
    if debian.is_file():
        ours = (own / "sources.list.d/debian.sources").read_text().splitlines()
        theirs = debian.read_text().splitlines()
        assert len(ours) == len(theirs)
        for a, b in zip(ours, theirs):
            if b.startswith("Components:") and " main" in b:
                assert set(a.split()) == set(b.split()) | {"contrib", "non-free"}
            else:
                assert a == b


def test_stage_times_book_a_call_that_died_and_sum_over_calls(tmp_path):
    # a call died in stage 1 (started 1000 s ago, last wrote 400 s ago); the next call books
    # those 600 s, then runs stage 1 itself; make_results sums the two calls
    exp = tmp_path / "exp"
    exp.mkdir()
    script = f"""
set -euo pipefail
stage=0; stop_stage=9
. tools/recipe.sh
exp_dir={exp}
now=$(date +%s)
printf '0\\t40\\tdata preparation\\n1\\t0\\ttraining: Table I\\trunning\\t%s\\n' $((now - 1000)) > $exp_dir/timing.tsv
touch -d @$((now - 2000)) $exp_dir/before_the_call
touch -d @$((now - 900)) $exp_dir/a
touch -d @$((now - 400)) $exp_dir/b
call_start=$now
touch -d @$((now + 5)) $exp_dir/written_by_this_call
book_dead_calls
begin_stage 1 "training" "training: Table I"
end_stage 1
"""
    r = run("bash", "-c", script)
    assert r.returncode == 0, r.stderr
    rows = [line.split("\t") for line in (exp / "timing.tsv").read_text().splitlines()]
    assert rows[0] == ["0", "40", "data preparation"]
    assert rows[1] == ["1", "600", "training: Table I", "interrupted"]
    assert rows[2][0] == "1" and rows[2][2] == "training: Table I" and len(rows[2]) == 3
    assert "interrupted: 600 s booked" in r.stdout + r.stderr

    from zipformer_pc.scoring import make_results
    (exp / "timing.tsv").write_text((exp / "timing.tsv").read_text() + "6\t0\tresults\trunning\t1\n")
    timing, calls = make_results.read_timing(exp)
    assert timing == [("0", 40, "data preparation"), ("1", 600 + int(rows[2][1]), "training: Table I")]
    assert calls == 2
