#!/usr/bin/env bash
# Create <repo>/.venv with the pinned Python reference stack for Loopix/Sphinx
# interop tests: sphinxmix 0.0.7, petlib 0.0.45, msgpack-python 0.5.6.
# Needs: python3 (3.11 tested) with venv, build-essential, libssl-dev, libffi-dev.
# Idempotent: re-running with a complete venv does nothing.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
venv="${ONIONMIX_VENV:-$repo/.venv}"
py="${PYTHON:-python3}"

check() {
    "$venv/bin/python" - <<'PY' 2>/dev/null
import sphinxmix, petlib, msgpack
from importlib.metadata import version
assert version("sphinxmix") == "0.0.7", version("sphinxmix")
assert version("petlib") == "0.0.45", version("petlib")
assert msgpack.version[:3] == (0, 5, 6), msgpack.version
from petlib.pack import encode, decode
from petlib.ec import EcGroup
G = EcGroup(713)
assert decode(encode(G.generator())) == G.generator()
PY
}

if [ -x "$venv/bin/python" ] && check; then
    echo "sphinxmix venv ready: $venv"
    exit 0
fi

if [ ! -x "$venv/bin/python" ]; then
    "$py" -m venv "$venv"
fi
"$venv/bin/python" -m pip install --quiet --upgrade "pip<25" "setuptools<70" wheel
# Order matters: msgpack-python first so nothing pulls a newer msgpack that
# breaks petlib.pack.decode (it passes encoding= to unpackb).
"$venv/bin/python" -m pip install --quiet "msgpack-python==0.5.6"
"$venv/bin/python" -m pip install --quiet "petlib==0.0.45" "sphinxmix==0.0.7" "msgpack-python==0.5.6"

if check; then
    echo "sphinxmix venv ready: $venv"
else
    echo "sphinxmix venv at $venv failed its self-check" >&2
    exit 1
fi
