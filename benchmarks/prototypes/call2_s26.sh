#!/usr/bin/env bash
# Twenty-second session, second call: where graph replay still trails Inductor after call 1's sweep
# (bf16 (8,512,32,32) backward 0.79x; fp32 (1,16,64,64) and (64,256,7,7) backward 0.94x; bf16
# (8,512,32,32) and (4,128,128,128) forward 0.94x/0.95x): tune.py's graph ranking of every plan, then ncu
# of the backward against Inductor's (next_s26b.sh's shapes), then the fp32 affine probe if time is left.
set -uo pipefail
END=$((SECONDS + 585))
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 INSTANCE_NORM_REQUIRE_GPU=1 TORCH_EXTENSIONS_DIR=/tmp/ext
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv; md5sum instance_norm.py; } > $OUT/device.txt 2>&1
timeout 240 python3 -c "import instance_norm; instance_norm.load_extension()" > $OUT/build.txt 2>&1 || exit 1
{
timeout 90 python3 benchmarks/tune.py --graph --backward --shapes 8x512x32x32 --dtypes bfloat16,float16 --top 8
timeout 90 python3 benchmarks/tune.py --graph --backward --shapes 1x16x64x64,64x256x7x7 --dtypes float32 --top 6
timeout 90 python3 benchmarks/tune.py --graph --shapes 8x512x32x32,4x128x128x128 --dtypes bfloat16 --top 6
} > $OUT/tune.txt 2>&1
cut -c1-120 $OUT/tune.txt
SECTIONS="--section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis"
mkdir -p $OUT/ncu
for spec in "8 512 32 32 bfloat16" "1 16 64 64 float32"; do
  for impl in ours compile; do
    [ $((END - SECONDS)) -lt 150 ] && break 2
    timeout 80 ncu --clock-control none --nvtx --nvtx-include "measure/" $SECTIONS \
      python3 benchmarks/prototypes/ncu_bwd_s26.py $impl $spec > $OUT/ncu/ncu_bwd_${impl}_$(echo $spec | tr ' ' _).txt 2>&1
  done
done
grep -h "Duration\|Achieved Occupancy\|Registers Per\|Block Size\|Grid Size\|Memory Throughput\|No Eligible\|Issued Warp\|  void\|triton_\|==PROF==" $OUT/ncu/*.txt | cut -c1-150
tar czf $OUT/ncu.tgz -C $OUT ncu && rm -rf $OUT/ncu
left=$((END - SECONDS - 5))
[ $left -gt 30 ] && { timeout $left python3 benchmarks/prototypes/bwd_affine_probe_s25.py --dtypes float32 > $OUT/bwd_affine_probe.txt 2>&1; echo "rc=$?" >> $OUT/bwd_affine_probe.txt; grep -v "^    " $OUT/bwd_affine_probe.txt | cut -c1-150; }
