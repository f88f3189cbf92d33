#!/usr/bin/env bash
# Prepared in the thirty-first session (no device time left): cluster plans with 16 and 32 vectors a thread
# (cluster_wide_s35.patch), against the stream / onchip defaults where quack's CuTe-DSL LayerNorm led
# (fp32 and bf16 (32,3,224,224): graph 11.9 / 8.4 us against our 15.7 / 10.4, s35/call3-4), and two rows where
# we are even with it. The plan tests first (K = 16 and 32 in test_plan_cluster), then tune.py --loose in both
# timings, cluster plans and the default only (--match), one dtype a process.
#   run(command="bash benchmarks/prototypes/next_s36a.sh", timeout_s=590)
set -uo pipefail
git apply benchmarks/prototypes/cluster_wide_s35.patch || { echo "patch does not apply"; exit 1; }
source benchmarks/prototypes/device_base.sh
timeout 200 python3 -m pytest -q tests/test_gpu.py -p no:cacheprovider -k "test_plan_cluster or test_candidate_plans_all_run" \
  > $OUT/tests.txt 2>&1; echo "tests rc=$? at $((SECONDS - START)) s"; tail -2 $OUT/tests.txt
S=32x3x224x224,16x3x224x224,4x128x128x128,16x64x256x256
for d in float32 bfloat16; do
  for mode in "" "--graph"; do
    [ $((SECONDS - START)) -gt 540 ] && break
    timeout 60 python3 benchmarks/tune.py --loose $mode --match cluster,stream --shapes $S --dtypes $d --top 6 \
      >> $OUT/tune_${d}.txt 2>&1
    echo "tune $d $mode rc=$? at $((SECONDS - START)) s"
  done
done
grep -h "default\|^float\|^bfloat" $OUT/tune_*.txt | cut -c1-120 | head -60
git apply -R benchmarks/prototypes/cluster_wide_s35.patch
(cd $OUT && tar czf logs.tgz build*.txt device.txt && rm -f build*.txt device.txt)
