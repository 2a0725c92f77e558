#!/usr/bin/env bash
# The GPU checks, for whoever next has one GPU (its parts are capped at 8 minutes in all; not yet run on a GPU;
# nothing is downloaded):
#   bash benchmarks/gpu_check.sh [results folder, default benchmarks/results/gpu-<date>]
# 1. the GPU tests (`-m gpu`): FSDP2, DeepSpeed ZeRO-2 / ZeRO-3 and DDP launches of the CLI on a tiny model, the CUDA
#    readout against the CPU kernel, the bf16 fused-head equality;
# 2. the GPU rows of docs/guides/performance.md, with the protocol they were measured with (2 timing processes x 5
#    steps, settings interleaved, peak memory one setting per fresh process): Llama 3.1 8B's shape with random weights
#    at 4 x 512 in bf16 (LoRA r16 on 32 layers; full fine-tuning of 8 layers with the ERM arm), and SmolLM2-135M's
#    shape at 16 x 512.
# Each part has its own time limit (8 minutes in all); a failed part is reported at the end and the script exits
# non-zero.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-benchmarks/results/gpu-$(date +%Y-%m-%d)}
mkdir -p "$OUT"
PY=${PYTHON:-python}
failed=()
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  $PY -c "import torch, transformers, trl, peft; print('torch', torch.__version__, 'transformers', transformers.__version__, 'trl', trl.__version__, 'peft', peft.__version__)"
  git rev-parse --short=7 HEAD 2>/dev/null || echo "not a git checkout"
} | tee "$OUT/device.txt"

part() {  # part NAME LIMIT_SECONDS COMMAND...
  local name=$1 limit=$2
  shift 2
  echo "== $name (at most ${limit} s)"
  local start=$SECONDS
  if timeout "$limit" "$@" > "$OUT/$name.log" 2>&1; then
    echo "   ok in $((SECONDS - start)) s"
  else
    echo "   FAILED after $((SECONDS - start)) s: tail of $OUT/$name.log"
    tail -20 "$OUT/$name.log"
    failed+=("$name")
  fi
}

part gpu_tests 225 $PY -m pytest -m gpu -q -p no:cacheprovider tests/trainers/test_gpu.py
STEP="$PY benchmarks/step_time.py --dtype bf16 --repeats 2 --steps 5 --warmup 1"
part step_time_8b_lora 120 $STEP --model llama-8b-shape --lora --batch 4 --seq 512 --settings sft,auto \
  --out "$OUT/step_time_8b_lora.json"
part step_time_8b_full_8_layers 85 $STEP --model llama-8b-shape --num-layers 8 --batch 4 --seq 512 \
  --settings sft,none,auto --out "$OUT/step_time_8b_full_8_layers.json"
part step_time_smollm2_shape 50 $STEP --model smollm2-shape --batch 16 --seq 512 --settings sft,auto \
  --out "$OUT/step_time_smollm2_shape.json"

$PY - "$OUT" <<'PY'
import glob, json, os, sys
for path in sorted(glob.glob(os.path.join(sys.argv[1], "step_time_*.json"))):
    result = json.load(open(path))
    sft = next(r for r in result["rows"] if r["setting"] == "sft")
    print(f"{os.path.basename(path)}: {result['model']}, {result['device']}, SFT {sft['median_step_s']:.4f} s")
    for r in result["rows"]:
        if r["setting"] != "sft":
            low, high = r["time_ratio_ci95"]
            memory = "-" if r["memory_ratio"] is None else f"{r['memory_ratio']:.3f}x"
            print(f"  {r['setting']}: {r['time_ratio']:.3f}x [{low:.3f}, {high:.3f}] (FLOP est. "
                  f"{r['flop_ratio_estimate']:.3f}), memory {memory}")
PY
if ((${#failed[@]})); then
  echo "failed: ${failed[*]}"
  exit 1
fi
echo "all GPU checks passed; results in $OUT"
