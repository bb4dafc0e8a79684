#!/usr/bin/env bash
# The README's test command: on a fresh machine, install everything and run every check.
#
#   1. system packages the tests use (opentracker, aria2, systemd-analyze, iproute2; buildah,
#      debootstrap and prometheus for deploy/'s image and alerts) and the build's (gcc and
#      python3-dev for the C extension, python3-venv), those missing, via apt-get when root;
#   2. a virtual environment (.venv-test, or $BLOOMSWARM_VENV) with the project and its
#      dev extras installed the way users install it (not editable: the C extension is
#      built exactly as `pip install .` builds it);
#   3. ruff, mypy (strict) and pytest.
#
# Extra arguments go to pytest, e.g. `scripts/test.sh -k live -x`.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${BLOOMSWARM_VENV:-.venv-test}
case $venv in /*) ;; *) venv=$PWD/$venv ;; esac
python=${PYTHON:-python3}

log() { printf '\n== %s\n' "$*"; }

log "system packages"
missing=()
command -v opentracker >/dev/null 2>&1 || missing+=(opentracker)
command -v aria2c >/dev/null 2>&1 || missing+=(aria2)
command -v systemd-analyze >/dev/null 2>&1 || missing+=(systemd)  # deploy/ unit checks
command -v ip >/dev/null 2>&1 || missing+=(iproute2)  # the LSD test's network namespace
command -v buildah >/dev/null 2>&1 || missing+=(buildah)  # deploy/Dockerfile built and run
command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)  # ... on a Debian base made here
command -v promtool >/dev/null 2>&1 || missing+=(prometheus)  # promtool, and the live alert test
# The build: BLOOMSWARM_REQUIRE_EXTENSION=1 below makes a C extension that fails to build an error.
command -v gcc >/dev/null 2>&1 || command -v cc >/dev/null 2>&1 || missing+=(gcc)
"$python" -c 'import os, sysconfig
raise SystemExit(not os.path.isfile(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' \
  >/dev/null 2>&1 || missing+=(python3-dev)  # Python.h
[ -x "$venv/bin/python" ] || "$python" -c 'import ensurepip, venv' >/dev/null 2>&1 \
  || missing+=(python3-venv)  # `python3 -m venv` with pip
if ((${#missing[@]})); then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null || echo "warning: apt-get update failed"
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null \
      || echo "warning: could not install ${missing[*]}; tests that need them will say so"
  else
    echo "warning: ${missing[*]} missing and not root: tests that need them will say so"
  fi
fi
for tool in opentracker aria2c systemd-analyze ip buildah debootstrap prometheus promtool gcc; do
  printf '  %-12s %s\n' "$tool" "$(command -v "$tool" || echo 'not installed')"
done

log "virtual environment $venv"
[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
"$venv/bin/python" -m pip install -q --upgrade pip
BLOOMSWARM_REQUIRE_EXTENSION=1 "$venv/bin/python" -m pip install -q ".[dev,dask,parquet,bench]"
"$venv/bin/python" -c "from bloomswarm.common.fastpath import EXTENSION; print('  C extension:', 'built' if EXTENSION else 'NOT built (pure-Python path)')"

log "ruff"
"$venv/bin/ruff" check .

log "mypy"
# mypy reports nothing inside installed packages, so the package is checked in a copy of
# the folders laid out as they install (bloomswarm/, bloomswarm/common/, ...); then the
# tests, benchmarks and scripts against the installed package.
tree=$(mktemp -d)
trap 'rm -rf "$tree"' EXIT
"$venv/bin/python" scripts/package_tree.py "$tree"
(cd "$tree" && "$venv/bin/mypy" --config-file "$OLDPWD/pyproject.toml" -p bloomswarm)
"$venv/bin/mypy" tests benchmarks scripts

log "pytest"
set +e
"$venv/bin/python" -m pytest "$@"
status=$?
set -e
if [ "$status" = 5 ]; then
  echo "error: pytest collected no tests" >&2
fi
exit "$status"
