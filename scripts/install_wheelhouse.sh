#!/usr/bin/env bash
# Install constrained-sft from a wheelhouse (scripts/wheelhouse.py) on a machine without network, keeping the
# machine's own torch:
#   bash scripts/install_wheelhouse.sh WHEELHOUSE [PYTHON] [EXTRAS]
# PYTHON: the interpreter to install into (default: python; a venv made with --system-site-packages keeps the system
# torch visible). EXTRAS: e.g. offline. pip looks only in the wheelhouse's parts (--no-index): a missing wheel is an
# error naming it, never a download. Every argument is checked before pip runs: one line, exit status 2.
set -euo pipefail
refuse() {
  echo "install_wheelhouse.sh: error: $1" >&2
  exit 2
}
(($# >= 1)) || refuse "WHEELHOUSE is required: bash scripts/install_wheelhouse.sh WHEELHOUSE [PYTHON] [EXTRAS]"
house=$1
py=${2:-python}
extras=${3:-}
[[ -d $house ]] || refuse "WHEELHOUSE $house is not a folder; give the folder scripts/wheelhouse.py (or gpu_bundle.py pack) wrote"
links=()
wheels=0
for part in "$house"/part-*/; do
  [[ -d $part ]] || continue
  links+=(--find-links "$part")
  wheels=$((wheels + $(find "$part" -maxdepth 1 -name '*.whl' | wc -l)))
done
((${#links[@]} > 0)) || refuse "WHEELHOUSE $house has no part-*/ folder; build it with scripts/wheelhouse.py and carry every part"
((wheels > 0)) || refuse "WHEELHOUSE $house holds no wheel (*.whl) in its parts; carry the parts that hold them"
compgen -G "$house/part-*/constrained_sft-*.whl" > /dev/null ||
  refuse "WHEELHOUSE $house holds no constrained_sft wheel; carry every part of the wheelhouse"
if [[ -n $extras && ! $extras =~ ^[A-Za-z0-9_-]+(,[A-Za-z0-9_-]+)*$ ]]; then
  refuse "EXTRAS '$extras': give extras by name, comma-separated (e.g. offline)"
fi
command -v "$py" > /dev/null 2>&1 || refuse "PYTHON $py: no such interpreter; give the Python to install into"
"$py" -c "import torch" > /dev/null 2>&1 ||
  refuse "PYTHON $py has no torch; install the machine's torch first (the wheelhouse leaves it out)"
"$py" -c "import torch; print('keeping torch', torch.__version__)"
# every carried wheel by its file, so its version (the lock's) replaces an older one the machine has; pip resolves
# the rest from the parts and what the machine has
mapfile -t carried < <(find "$house"/part-*/ -maxdepth 1 -name '*.whl' ! -name 'constrained_sft-*' | sort)
"$py" -m pip install --no-index "${links[@]}" "constrained-sft${extras:+[$extras]}" "${carried[@]}"
"$py" -m pip check
