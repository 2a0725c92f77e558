#!/usr/bin/env bash
# The package as a user installs it, not as this checkout runs it (CI): a wheelhouse of every dependency but torch,
# pinned to the lock (scripts/wheelhouse.py), installed with `pip install --no-index` into a fresh environment that
# already has its torch (as a machine without network keeps its own); then, from a folder outside the checkout, every
# command's --help. Prints the wheelhouse's size.
#   bash scripts/check_install.sh [WORK_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PY=${PY:-$ROOT/.venv/bin/python}
WORK=${1:-$(mktemp -d)}
mkdir -p "$WORK"
echo "== wheelhouse for $($PY -c 'import sys; print("Python %d.%d" % sys.version_info[:2])')"
$PY scripts/wheelhouse.py "$WORK/wheelhouse" 2>&1 | grep -v -i "warning\|^ *!!\|^ *\*\|^ *$\|please use\|by 2027\|or your builds\|see https\|corresp(\|with strategy"
echo "== a fresh environment with its own torch, then the wheelhouse with --no-index"
rm -rf "$WORK/venv"
$PY -m venv "$WORK/venv"
"$WORK/venv/bin/python" -m pip install --quiet --upgrade pip
"$WORK/venv/bin/python" -m pip install --quiet -c requirements/lock-cpu.txt torch  # the machine's own torch
bash scripts/install_wheelhouse.sh "$WORK/wheelhouse" "$WORK/venv/bin/python"
echo "== from outside the checkout"
mkdir -p "$WORK/elsewhere"
cd "$WORK/elsewhere"
BIN=$WORK/venv/bin
$BIN/python - "$ROOT" <<'PY'
import os, sys
import constrained_sft
where = os.path.dirname(constrained_sft.__file__)
assert not where.startswith(sys.argv[1]), f"imported from the checkout: {where}"
print("constrained_sft", constrained_sft.__version__, "from", where)
PY
for c in "" train "eval robustness" "eval generate" "eval alpaca" "eval exits" "eval harness" sweep study; do
  # shellcheck disable=SC2086
  $BIN/constrained-sft $c --help > /dev/null || { echo "constrained-sft $c --help failed" >&2; exit 1; }
done
echo "every --help ran from $PWD"
