#!/usr/bin/env bash
# The main job: the whole recipe on the embedded synthetic corpus
# (sets up the environment first; idempotent, finished stages are skipped).
# Extra arguments go to egs/synth/run.sh, e.g.  bash run.sh --stage 2 --quick true
set -euo pipefail
cd "$(dirname "$0")"
bash tools/setup_env.sh
exec bash egs/synth/run.sh "$@"
