#!/usr/bin/env bash
# Run the test suite: sets up the environment (idempotent), then pytest.
# Extra arguments go to pytest, e.g.  bash test.sh -k metrics -x
set -euo pipefail
cd "$(dirname "$0")"
bash tools/setup_env.sh
exec "${ZPC_VENV:-.venv}/bin/python" -m pytest "$@"
