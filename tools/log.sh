# The shell scripts' one log function, sourced by prepare.sh, tools/recipe.sh (the recipes)
# and tools/setup_env.sh (which runs before the venv exists: this file needs nothing but bash
# and date).  A line reads `TIME (SCRIPT) MESSAGE`, SCRIPT as it was run (egs/synth/run.sh),
# TIME as in the Python logs of zipformer_pc/logs.py.
log() { echo "$(date '+%Y-%m-%d %H:%M:%S') ($0) $*"; }
