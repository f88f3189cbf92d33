#!/usr/bin/env bash
# Twenty-second session, third call: call2_s26.sh's ncu with --profile-from-start off (its NVTX filter
# profiled nothing: autograd launches the backward from its device thread), then the fixed affine probe.
set -uo pipefail
END=$((SECONDS + 400))
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 INSTANCE_NORM_REQUIRE_GPU=1 TORCH_EXTENSIONS_DIR=/tmp/ext
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv; md5sum instance_norm.py; } > $OUT/device.txt 2>&1
timeout 240 python3 -c "import instance_norm; instance_norm.load_extension()" > $OUT/build.txt 2>&1 || exit 1
SECTIONS="--section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis"
mkdir -p $OUT/ncu
for spec in "8 512 32 32 bfloat16" "1 16 64 64 float32"; do
  for impl in ours compile; do
    [ $((END - SECONDS)) -lt 150 ] && break 2
    timeout 80 ncu --clock-control none --profile-from-start off $SECTIONS \
      python3 benchmarks/prototypes/ncu_bwd_s26.py $impl $spec > $OUT/ncu/ncu_bwd_${impl}_$(echo $spec | tr ' ' _).txt 2>&1
  done
done
for f in $OUT/ncu/*.txt; do echo "== $(basename $f)"; grep -h "Duration\|Achieved Occupancy\|Registers Per\|Block Size\|Grid Size\|Memory Throughput\|No Eligible\|Issued Warp\|Theoretical Occ\|  void\|triton_\|Block Limit" $f | cut -c1-150; done
tar czf $OUT/ncu.tgz -C $OUT ncu && rm -rf $OUT/ncu
left=$((END - SECONDS - 5))
[ $left -gt 30 ] && { timeout $left python3 benchmarks/prototypes/bwd_affine_probe_s25.py --dtypes float32 > $OUT/bwd_affine_probe.txt 2>&1; echo "rc=$?" >> $OUT/bwd_affine_probe.txt; grep -v "^    " $OUT/bwd_affine_probe.txt | cut -c1-150; }
