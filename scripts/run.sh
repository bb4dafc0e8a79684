#!/usr/bin/env bash
# The README's run command: install bloomswarm with its demo extra (moto's S3 server) into
# .venv and run `bloomswarm demo`: S3 (moto), opentracker or the DHT, a publisher, N agents
# and a lookup client, all on 127.0.0.1. Needs no root and no cloud account.
# Arguments go to the demo, e.g. `scripts/run.sh --agents 16 --keys 10000000 --rounds 4`.
# BLOOMSWARM_VENV picks another virtualenv, PYTHON another interpreter for a new one.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${BLOOMSWARM_VENV:-.venv}
python=${PYTHON:-python3}

if [ ! -x "$venv/bin/python" ]; then
    echo "run.sh: creating $venv"
    "$python" -m venv "$venv"
    "$venv/bin/python" -m pip install -q --upgrade pip
fi
# An editable install of this checkout: later runs start at once and see source changes.
if ! "$venv/bin/python" - <<'EOF' 2>/dev/null; then
import os, bloomswarm.sandbox.fleet, moto.server
assert os.path.realpath(bloomswarm.sandbox.fleet.__file__).startswith(os.path.realpath("sandbox") + os.sep)
EOF
    echo "run.sh: installing bloomswarm with the demo extra into $venv (pip install -e '.[demo]')"
    PYTHONWARNINGS=ignore "$venv/bin/python" -m pip install -q -e '.[demo]'
fi

case " $* " in
    *" --discovery dht "* | *" --discovery=dht "*) ;;
    *)
        if command -v opentracker >/dev/null 2>&1; then
            echo "run.sh: opentracker found at $(command -v opentracker): the agents find each other through it"
        else
            echo "run.sh: opentracker is not installed, so the agents find each other through the DHT" \
                 "bootstrapped from the first agent (for a tracker: apt-get install opentracker, as root)"
        fi
        ;;
esac
exec "$venv/bin/bloomswarm" demo "$@"
