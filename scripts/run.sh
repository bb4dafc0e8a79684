#!/usr/bin/env bash
# The README's run command: install bloomswarm into .venv and run `bloomswarm demo`.
# Arguments go to the demo, e.g. `scripts/run.sh --keys 5000000 --rounds 4`.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${BLOOMSWARM_VENV:-.venv}
[ -x "$venv/bin/python" ] || "${PYTHON:-python3}" -m venv "$venv"
"$venv/bin/python" -m pip install -q --upgrade pip
"$venv/bin/python" -m pip install -q .
exec "$venv/bin/bloomswarm" demo "$@"
