#!/usr/bin/env bash
# Install constrained-sft from a wheelhouse (scripts/wheelhouse.py) on a machine without network, keeping the
# machine's own torch:
#   bash scripts/install_wheelhouse.sh WHEELHOUSE [PYTHON] [EXTRAS]
# PYTHON: the interpreter to install into (default: python; a venv made with --system-site-packages keeps the system
# torch visible). EXTRAS: e.g. offline. pip looks only in the wheelhouse's parts (--no-index): a missing wheel is an
# error naming it, never a download.
set -euo pipefail
house=${1:?usage: install_wheelhouse.sh WHEELHOUSE [PYTHON] [EXTRAS]}
py=${2:-python}
extras=${3:-}
links=()
for part in "$house"/part-*/; do links+=(--find-links "$part"); done
if ((${#links[@]} == 0)); then
  echo "install_wheelhouse: $house has no part-*/ folder (build it with scripts/wheelhouse.py)" >&2
  exit 2
fi
"$py" -c "import torch; print('keeping torch', torch.__version__)" || {
  echo "install_wheelhouse: $py has no torch; install the machine's torch first (the wheelhouse leaves it out)" >&2
  exit 2
}
"$py" -m pip install --no-index "${links[@]}" "constrained-sft${extras:+[$extras]}"
"$py" -m pip check
