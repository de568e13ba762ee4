#!/usr/bin/env bash
# Create <repo>/.venv-stem with the pinned stem (the Tor Project's Python
# controller library) for the control-port interop tests: stem 1.8.2.
# Needs: python3 (3.11 tested) with venv. Stem is pure Python.
# Idempotent: re-running with a complete venv does nothing.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
venv="${ONIONMIX_STEM_VENV:-$repo/.venv-stem}"
py="${PYTHON:-python3}"

check() {
    "$venv/bin/python" - <<'PY' 2>/dev/null
import stem, stem.control
assert stem.__version__ == "1.8.2", stem.__version__
PY
}

if [ -x "$venv/bin/python" ] && check; then
    echo "stem venv ready: $venv"
    exit 0
fi

if [ ! -x "$venv/bin/python" ]; then
    "$py" -m venv "$venv"
fi
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check "stem==1.8.2"

if check; then
    echo "stem venv ready: $venv"
else
    echo "stem venv at $venv failed its self-check" >&2
    exit 1
fi
