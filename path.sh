# Source from any recipe script: puts the project's venv first on PATH.
ZPC_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export ZPC_ROOT
export PATH="${ZPC_VENV:-$ZPC_ROOT/.venv}/bin:$PATH"
export PYTHONUNBUFFERED=1
