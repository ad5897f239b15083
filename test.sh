#!/usr/bin/env bash
# Run the test suite: sets up the environment (idempotent), then pytest.
# Extra arguments go to pytest, e.g.  bash test.sh -k metrics -x
#   bash test.sh           the full suite (what CI runs)
#   bash test.sh --fast    the fast layer: every test not marked slow (no end-to-end runs)
#   bash test.sh tests/decoding   one area: the tests are in folders by area (tests/conftest.py)
# The test files run on two processes (pytest-xdist, whole files per process, the
# long ones first: tests/conftest.py) when the machine has two cores or more;
# ZPC_TEST_WORKERS=N sets the number, 1 runs everything in this process (as does
# giving -n yourself, e.g. -n 0).
set -euo pipefail
cd "$(dirname "$0")"
bash tools/setup_env.sh
args=()
for a in "$@"; do
  if [ "$a" = --fast ]; then args+=(-m "not slow"); else args+=("$a"); fi
done
set -- ${args[@]+"${args[@]}"}
python="${ZPC_VENV:-.venv}/bin/python"
workers="${ZPC_TEST_WORKERS:-$("$python" -c 'import os; print(min(2, len(os.sched_getaffinity(0))))')}"
parallel=()
if [ "$workers" -gt 1 ] && [[ " $* " != *" -n "* ]]; then
  parallel=(-n "$workers" --dist loadfile --no-loadscope-reorder)
fi
exec "$python" -m pytest "${parallel[@]}" "$@"
