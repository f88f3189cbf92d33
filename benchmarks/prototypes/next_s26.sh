#!/usr/bin/env bash
# Prepared in the twenty-first session for the next one's first device call (benchmarks/NOTES.md,
# twenty-first session, next steps). run(command="bash benchmarks/prototypes/next_s26.sh", timeout_s=600)
# 1. bench.py's forward and backward tables below the main shape on the final code (the backward table of
#    the twenty-first session predates the backward's register path).
# 2. ncu of the backward, ours against Inductor's, where graph replay trails it most: bf16 and fp32
#    (8,512,32,32), fp32 (1,16,64,64).
# 3. bwd_affine_probe_s25.py (fixed: it had skipped every plan), float32.
set -uo pipefail
END=$((SECONDS + 585))
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 INSTANCE_NORM_REQUIRE_GPU=1 TORCH_EXTENSIONS_DIR=/tmp/ext
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv; md5sum instance_norm.py; } > $OUT/device.txt 2>&1
timeout 240 python3 -c "import time; t=time.time(); import instance_norm; instance_norm.load_extension(); print(f'built {time.time()-t:.1f} s')" > $OUT/build.txt 2>&1 || exit 1
timeout 260 python3 benchmarks/bench.py --quick --backward --dtypes float32,bfloat16 \
  --shapes 64x256x7x7,3x5x127x129,32x3x224x224,8x512x32x32,4x128x128x128,1x16x64x64,16x64x256x256 --out $OUT/sweep > $OUT/bench.txt 2>&1
echo "bench rc=$?" >> $OUT/bench.txt
tar czf $OUT/sweep.tgz -C $OUT sweep && rm -rf $OUT/sweep
tail -3 $OUT/bench.txt
SECTIONS="--section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis"
mkdir -p $OUT/ncu
for spec in "8 512 32 32 bfloat16" "8 512 32 32 float32" "1 16 64 64 float32"; do
  for impl in ours compile; do
    [ $((END - SECONDS)) -lt 90 ] && break 2
    timeout 60 ncu --clock-control none --nvtx --nvtx-include "measure/" $SECTIONS \
      python3 benchmarks/prototypes/ncu_bwd_s26.py $impl $spec > $OUT/ncu/ncu_bwd_${impl}_$(echo $spec | tr ' ' _).txt 2>&1
  done
done
tar czf $OUT/ncu.tgz -C $OUT ncu && rm -rf $OUT/ncu
left=$((END - SECONDS - 5))
[ $left -gt 20 ] && { timeout $left python3 benchmarks/prototypes/bwd_affine_probe_s25.py --dtypes float32 > $OUT/bwd_affine_probe.txt 2>&1; echo "rc=$?" >> $OUT/bwd_affine_probe.txt; grep -v "^    " $OUT/bwd_affine_probe.txt | cut -c1-150; }
