#!/usr/bin/env bash
# Every GPU measurement torchsim's validation uses, in one run on a CUDA machine (a few minutes on an H200):
#   OUT=results/ bash benchmarks/gpu_session.sh [profile]
# writes $OUT/microbench.csv (torchsim microbench: GEMMs, attention, bandwidth, launch gaps, sustained clocks and
# power), $OUT/llama_gpu.json (benchmarks/measure_llama_gpu.py: HF Llama-3-8B prefill and eager decode, per-kernel
# profiles) and nvidia-smi's view of the board before and after. Needs a CUDA build of PyTorch, transformers and
# nvidia-ml-py; runs from the checkout (PYTHONPATH), nothing installed.
set -u
OUT=${OUT:?set OUT to a folder}
HW=${1:-}
mkdir -p "$OUT"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
nvidia-smi -q > "$OUT/smi_before.txt" 2>&1
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem,power.limit,power.default_limit,enforced.power.limit \
  --format=csv >> "$OUT/smi_before.txt" 2>&1
$PY -m torchsim microbench --out "$OUT/microbench.csv" ${HW:+--hw "$HW"} 2>&1 | tee "$OUT/microbench.log"
$PY benchmarks/measure_llama_gpu.py --out "$OUT/llama_gpu.json" 2>&1 | tee "$OUT/llama_gpu.log"
nvidia-smi -q -d CLOCK,POWER,PERFORMANCE,TEMPERATURE > "$OUT/smi_after.txt" 2>&1
