#!/usr/bin/env bash
# Fortieth session, call 1 (prepared in the thirty-ninth; no patch). (1) Nsight Compute over one affine training
# step at tiny instances (ncu_step_s43.py): the forward's flat kernel, the backward's and the channel sums, their
# DRAM bytes and throughput. In the fp32 step at (4096,256,2,2) (s43/call1, torch.profiler): forward 17.16 us,
# backward 12.66, channel sums 9.92, for x of 16 MB; the forward also writes 8 MB of statistics and the backward
# reads them and writes 8 MB of sums. Whether the backward should recompute the statistics from x (which it
# reads anyway) and reduce the affine gradients itself depends on these bytes. (2) Issue 10's fused table
# again (bench.py --fused --quick; last run 2026-11-30, before the flat rows): the compiled blocks' do_bench and
# graph replay against nn.InstanceNorm2d's.
#   run(command="bash benchmarks/prototypes/next_s44a.sh", timeout_s=600)
set -uo pipefail
START=$SECONDS
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 INSTANCE_NORM_REQUIRE_GPU=1 TORCH_EXTENSIONS_DIR=/tmp/ext MAX_JOBS=16
md5sum instance_norm.py > $OUT/md5.txt
timeout 300 python3 -c "import instance_norm; instance_norm.load_extension(); print('built')" > $OUT/build.txt 2>&1
echo "built at $((SECONDS - START)) s"
for args in "4096 256 2 2 float32" "1024 256 4 4 float32" "4096 256 2 2 bfloat16"; do
  timeout 90 ncu --profile-from-start off --section SpeedOfLight --section MemoryWorkloadAnalysis --section LaunchStats \
    --metrics dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum \
    python3 benchmarks/prototypes/ncu_step_s43.py $args >> $OUT/ncu_step.txt 2>&1
  echo "ncu $args rc=$? at $((SECONDS - START)) s"
done
grep -E "^  [a-z_].*\(|Duration|dram__bytes|Memory Throughput" $OUT/ncu_step.txt | head -60
timeout $((590 - (SECONDS - START))) python3 benchmarks/bench.py --fused --quick --out $OUT/fused > $OUT/fused.txt 2>&1
echo "fused rc=$? at $((SECONDS - START)) s"; tail -30 $OUT/fused.txt
