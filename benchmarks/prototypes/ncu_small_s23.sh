#!/usr/bin/env bash
# Nineteenth session, call 7: ncu of our forward kernel and Inductor's at (8,512,32,32) and (1,16,64,64) fp32.
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 INSTANCE_NORM_REQUIRE_GPU=1 TORCH_EXTENSIONS_DIR=/tmp/ext
{ date -u; md5sum instance_norm.py; which ncu; ncu --version | tail -1; } > $OUT/device.txt 2>&1
timeout 240 python3 -c "import instance_norm; instance_norm.load_extension()" > $OUT/build.txt 2>&1 || exit 1
SECTIONS="--section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis"
for impl in ours compile; do
  for shape in "8 512 32 32" "1 16 64 64"; do
    f=$OUT/ncu_${impl}_$(echo $shape | tr ' ' x).txt
    timeout 100 ncu --clock-control none --nvtx --nvtx-include "measure/" $SECTIONS \
      python3 benchmarks/prototypes/ncu_small_s23.py $impl $shape float32 > $f 2>&1
  done
done
grep -h "Duration\|Achieved Occupancy\|Registers Per\|Block Size\|Grid Size\|Memory Throughput\|Warp Cycles Per Issued\|No Eligible\|  void\|triton_" $OUT/ncu_*.txt | cut -c1-160
