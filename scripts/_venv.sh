# Sourced by the other scripts: make .venv exist and hold this project installed.
# Usage: . scripts/_venv.sh [extras]   (extras like "test" or "test,spark")
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
    "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip setuptools wheel >/dev/null
extras="${1:-}"
target="."
[ -n "$extras" ] && target=".[${extras}]"
# Editable, so the compiled core is built in place and tests see the working tree.
.venv/bin/python -m pip install -q -e "$target"
