#!/usr/bin/env bash
# The package as a user installs it, not as this checkout runs it (CI):
#   1. the sdist, and the wheel built from it (`python -m build`), their metadata checked (`twine check --strict`),
#      the wheel's recipes, launch configs and size printed;
#   2. a wheelhouse of every dependency but torch pinned to the lock (scripts/wheelhouse.py) around that wheel,
#      installed with `pip install --no-index` into a fresh environment that already has its torch (as a machine
#      without network keeps its own); the wheelhouse's size printed;
#   3. from a folder outside the checkout: `constrained-sft recipes`, every command's --help, and a 2-step training
#      run by recipe name on a tiny model, whose model card must show the constraint table.
#   bash scripts/check_install.sh [WORK_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PY=${PY:-$ROOT/.venv/bin/python}
WORK=${1:-$(mktemp -d)}
mkdir -p "$WORK"
noloc() { grep -v "^WARNING: Location" || true; }  # this machine's pip.conf names index folders it lacks
quiet() { grep -v -i "warning\|^ *!!\|^ *\*\|^ *$\|please use\|by 2027\|or your builds\|see https\|corresp(\|with strategy" || true; }

echo "== sdist and wheel (python -m build: the wheel is built from the sdist), twine check"
rm -rf "$WORK/tools" "$WORK/dist"
$PY -m venv "$WORK/tools"
"$WORK/tools/bin/python" -m pip install --quiet -r requirements/packaging.txt 2>&1 | noloc
"$WORK/tools/bin/python" -m build --no-isolation --outdir "$WORK/dist" . > "$WORK/build.log" 2>&1 \
  || { tail -30 "$WORK/build.log"; exit 1; }
grep "^Successfully built" "$WORK/build.log"
"$WORK/tools/bin/python" -m twine check --strict "$WORK"/dist/*
WHEEL=$(ls "$WORK"/dist/*.whl)
"$WORK/tools/bin/python" - "$WHEEL" "$WORK"/dist/*.tar.gz <<'PY'
import os, sys, tarfile, zipfile
wheel, sdist = sys.argv[1], sys.argv[2]
names = zipfile.ZipFile(wheel).namelist()
recipes = [n for n in names if n.startswith("constrained_sft/recipes/") and n.endswith(".yaml")]
configs = [n for n in names if n.startswith("constrained_sft/accelerate_configs/") and n.endswith(".yaml")]
assert len(recipes) >= 39 and len(configs) >= 5, (len(recipes), len(configs))
assert "constrained_sft/trainers/templates/model_card.md" in names
in_sdist = [n for n in tarfile.open(sdist).getnames() if "/constrained_sft/recipes/" in n and n.endswith(".yaml")]
assert len(in_sdist) == len(recipes), (len(in_sdist), len(recipes))
print(f"{os.path.basename(wheel)}: {len(names)} files, {os.path.getsize(wheel) / 2**10:.0f} KiB; "
      f"{len(recipes)} recipes and search spaces, {len(configs)} accelerate configs, the model card template; "
      f"sdist {os.path.getsize(sdist) / 2**10:.0f} KiB")
PY

echo "== wheelhouse for $($PY -c 'import sys; print("Python %d.%d" % sys.version_info[:2])') around that wheel"
$PY scripts/wheelhouse.py "$WORK/wheelhouse" --project "$WHEEL" 2>&1 | quiet
echo "== a fresh environment with its own torch, then the wheelhouse with --no-index"
rm -rf "$WORK/venv"
$PY -m venv "$WORK/venv"
"$WORK/venv/bin/python" -m pip install --quiet --upgrade pip 2>&1 | noloc
"$WORK/venv/bin/python" -m pip install --quiet -c requirements/lock-cpu.txt torch 2>&1 | noloc  # the machine's torch
bash scripts/install_wheelhouse.sh "$WORK/wheelhouse" "$WORK/venv/bin/python" 2>&1 \
  | grep -v "^Processing\|^Requirement already\|^WARNING: Location\|Failed to initialize NumPy\|_conversion_method" || true

echo "== from outside the checkout"
rm -rf "$WORK/elsewhere"
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
$BIN/constrained-sft recipes > recipes.txt
grep -q "smollm2-135m/sharegpt/constrained" recipes.txt && grep -q "fsdp2" recipes.txt
echo "constrained-sft recipes: $(grep -c '^  ' recipes.txt) shipped files listed"
for c in "" train "eval robustness" "eval generate" "eval alpaca" "eval exits" "eval harness" sweep study recipes; do
  # shellcheck disable=SC2086
  $BIN/constrained-sft $c --help > /dev/null || { echo "constrained-sft $c --help failed" >&2; exit 1; }
done
echo "every --help ran from $PWD"
$BIN/python - <<'PY'
import json
from constrained_sft.testing import successor_dataset, tiny_causal_lm, tiny_tokenizer
tiny_causal_lm("llama").save_pretrained("tiny-lm")
tiny_tokenizer().save_pretrained("tiny-lm")
with open("data.jsonl", "w") as f:
    for row in successor_dataset(24):
        turns = [{"from": "human", "value": row["prompt"]}, {"from": "gpt", "value": row["completion"]}]
        f.write(json.dumps({"conversations": turns}) + "\n")
PY
$BIN/constrained-sft train --config smollm2-135m/sharegpt/constrained --model_name_or_path tiny-lm \
  --dataset_name data.jsonl --constrained_layers all --descent_epsilon 100 --max_steps 2 --eval_size 4 \
  --max_train_samples 20 --evaluate_before_training false --output_dir run > train.log 2>&1 \
  || { tail -20 train.log; exit 1; }
grep -q "## Constraints" run/README.md && grep -q "| 2 | .* | f_2 <= 0.95 f_1 |" run/README.md \
  && test -f run/constraints.json || { echo "run/README.md lacks the constraint table" >&2; cat run/README.md; exit 1; }
echo "trained 2 steps by recipe name (smollm2-135m/sharegpt/constrained); run/README.md has the constraint table"
