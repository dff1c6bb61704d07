#!/usr/bin/env bash
# Nsight Compute counts of the kernels benchmarks/ncu_kernels.py launches (cycles, SM clock, pipe utilisation,
# memory throughput), on a CUDA machine with ncu:  OUT=results/ bash benchmarks/gpu_ncu.sh
# writes $OUT/kernels.ncu-rep, its raw metrics and details pages as CSV, and ncu's log.
set -u
OUT=${OUT:?set OUT to a folder}
mkdir -p "$OUT"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
NCU=${NCU:-ncu}
$NCU --clock-control none --profile-from-start off --nvtx --target-processes all \
  --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
  --section LaunchStats --section Occupancy -o "$OUT/kernels" -f ${PYTHON:-python3} benchmarks/ncu_kernels.py \
  > "$OUT/ncu.log" 2>&1
echo "ncu rc $?"; tail -5 "$OUT/ncu.log"
$NCU -i "$OUT/kernels.ncu-rep" --page raw --csv > "$OUT/ncu_raw.csv" 2>>"$OUT/ncu.log"
$NCU -i "$OUT/kernels.ncu-rep" --page details --csv --print-nvtx-rename kernel > "$OUT/ncu_details.csv" 2>>"$OUT/ncu.log" \
  || $NCU -i "$OUT/kernels.ncu-rep" --page details --csv > "$OUT/ncu_details.csv" 2>>"$OUT/ncu.log"
wc -l "$OUT"/*.csv
