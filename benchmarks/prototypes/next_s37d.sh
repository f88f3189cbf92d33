#!/usr/bin/env bash
# Prepared in the thirty-second session (as next_s37a.sh), rebased in the thirty-third on the kept tmpl rows (flat_unruled_s37.patch), graph replay only in the tune: (1) ncu of the flat forward with and without the rows' cut where the
# uncut rows lost or won (ncu_rows_s36.py); (2) tune.py at the (N,3,H,W) neighbours of bf16 (16,3,224,224),
# where stream(CS=2,S=1,K=16) beat the default by 0.87x in graph replay (s36/call1), both timings, the default
# and the stream plans only. Run on a clean tree.
#   run(command="bash benchmarks/prototypes/next_s37d.sh", timeout_s=600)
set -uo pipefail
source benchmarks/prototypes/ab_env.sh unruled benchmarks/prototypes/flat_unruled_s37.patch
timeout 150 ncu --profile-from-start off --kernel-name regex:flat_kernel --section SpeedOfLight --section LaunchStats \
  --section Occupancy --section WarpStateStats --section InstructionStats --section MemoryWorkloadAnalysis_Tables \
  python3 benchmarks/prototypes/ncu_rows_s36.py > $OUT/ncu_rows.txt 2>&1
echo "ncu rc=$? at $((SECONDS - START)) s"
grep -E "^(cut|uncut) |Duration|Registers Per|Achieved Occupancy|Executed Instructions  |Warp Cycles Per Issued|Bank Conflicts|Shared Load|Shared Store" \
  $OUT/ncu_rows.txt | head -80
for d in bfloat16 float32; do
  for mode in "--graph"; do
    left=$((580 - (SECONDS - START)))
    [ $left -lt 40 ] && break
    timeout $((left < 90 ? left : 90)) python3 benchmarks/tune.py --loose $mode --match stream \
      --shapes 8x3x224x224,16x3x224x224,24x3x224x224,16x3x192x192,16x3x256x256,8x3x320x320 --dtypes $d --top 4 \
      >> $OUT/tune_${d}.txt 2>&1
    echo "tune $d $mode rc=$? at $((SECONDS - START)) s"
  done
done
grep -h "default\|^float\|^bfloat\|K=16" $OUT/tune_*.txt | cut -c1-120 | head -80
(cd $OUT && tar czf logs.tgz build*.txt device.txt && rm -f build*.txt device.txt)
