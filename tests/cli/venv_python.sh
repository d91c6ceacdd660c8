#!/usr/bin/env bash
# venv_python.sh ARGS...: Python with ARGS, the one the CLI runs the golden generator with (PARITY_PYTHON, else the
# venv under PARITY_HOME that scripts/bootstrap.sh makes, else python3).
py=${PARITY_PYTHON:-${PARITY_HOME:-${HOME:-/root}/.cache/parity}/venv/bin/python}
[ -n "${PARITY_PYTHON:-}" ] || [ -x "$py" ] || py=python3
exec "$py" "$@"
