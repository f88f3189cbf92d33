#!/usr/bin/env bash
# Twenty-second session, sixth call: where bf16 (8,512,32,32)'s backward spends its instructions and
# stalls, ours against Inductor's (graph replay 5.11 against 4.04 us in call 1; registers, CTA size and
# shared memory were ruled out in calls 4-5): ncu InstructionStats, WarpStateStats, SourceCounters.
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 INSTANCE_NORM_REQUIRE_GPU=1 TORCH_EXTENSIONS_DIR=/tmp/ext
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv; md5sum instance_norm.py; } > $OUT/device.txt 2>&1
timeout 240 python3 -c "import instance_norm; instance_norm.load_extension()" > $OUT/build.txt 2>&1 || exit 1
S="--section SpeedOfLight --section InstructionStats --section WarpStateStats --section SourceCounters --section Occupancy"
for impl in ours compile; do
  timeout 90 ncu --clock-control none --profile-from-start off $S \
    python3 benchmarks/prototypes/ncu_bwd_s26.py $impl 8 512 32 32 bfloat16 > $OUT/ncu_src_${impl}.txt 2>&1
done
grep -h "Duration\|Executed Ipc\|Issued Ipc\|Executed Instructions  \|Issued Instructions  \|Warp Cycles Per Issued\|  void\|triton_" $OUT/ncu_src_*.txt | cut -c1-150
