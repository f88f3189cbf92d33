#!/usr/bin/env bash
# Prepared in the thirty-first session (no device time left): cluster plans with 16 and 32 vectors a thread
# (cluster_wide_s35.patch), against the stream / onchip defaults where quack's CuTe-DSL LayerNorm led
# (fp32 and bf16 (32,3,224,224): graph 11.9 / 8.4 us against our 15.7 / 10.4, s35/call3-4). The plan tests
# first (K = 16 and 32 in test_plan_cluster; the epilogue kernels, which spill at K = 16 / 32, are not in
# this selection), then tune.py --loose in both timings at two shapes, the wide plans, the stream plans
# and the default only (--match), one dtype and timing a process. Run on a clean tree.
#   run(command="bash benchmarks/prototypes/next_s36a.sh", timeout_s=590)
set -uo pipefail
git diff --quiet -- instance_norm.py || { echo "instance_norm.py has uncommitted changes"; exit 1; }
git apply benchmarks/prototypes/cluster_wide_s35.patch || { echo "patch does not apply"; exit 1; }
trap 'git apply -R benchmarks/prototypes/cluster_wide_s35.patch' EXIT
source benchmarks/prototypes/device_base.sh
timeout 150 python3 -m pytest -q tests/test_gpu.py -p no:cacheprovider -k "test_plan_cluster or test_candidate_plans_all_run" \
  > $OUT/tests.txt 2>&1; echo "tests rc=$? at $((SECONDS - START)) s"; tail -2 $OUT/tests.txt
for d in float32 bfloat16; do
  for mode in "" "--graph"; do
    left=$((560 - (SECONDS - START)))
    [ $left -lt 30 ] && break
    timeout $((left < 70 ? left : 70)) python3 benchmarks/tune.py --loose $mode --match K=16,K=32,stream \
      --shapes 32x3x224x224,16x3x224x224 --dtypes $d --top 6 >> $OUT/tune_${d}.txt 2>&1
    echo "tune $d $mode rc=$? at $((SECONDS - START)) s"
  done
done
grep -h "default\|^float\|^bfloat\|K=16\|K=32" $OUT/tune_*.txt | cut -c1-120 | head -70
(cd $OUT && tar czf logs.tgz build*.txt device.txt && rm -f build*.txt device.txt)
