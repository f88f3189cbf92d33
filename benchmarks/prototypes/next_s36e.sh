#!/usr/bin/env bash
# Thirty-second session: the register rows' cut by lanes (N*C*G <= 512 an SM, the tree) against a cut by
# instances (N*C <= 64 an SM: flat_rows_inst_s36.patch) and the committed file (flat_base_s36.patch), at
# shapes where the two cuts differ (G = 16 / 32: 10x10, 12x12, 16x16); then the running-statistics test
# (its eager bound mended) and the cut's test, eight times over (fresh seeds).
#   run(command="bash benchmarks/prototypes/next_s36e.sh", timeout_s=420)
set -uo pipefail
source benchmarks/prototypes/ab_env.sh base benchmarks/prototypes/flat_base_s36.patch \
  inst benchmarks/prototypes/flat_rows_inst_s36.patch
SH=32x256x12x12,16x256x12x12,16x256x16x16,32x256x10x10
timeout 100 python3 benchmarks/prototypes/pdl_ab_s21.py base=/tmp/vab/base/instance_norm.py lanes=instance_norm.py \
  inst=/tmp/vab/inst/instance_norm.py --rounds 2 --cases fwd,train --shapes $SH --dtypes float32,bfloat16 \
  > $OUT/ab.txt 2>&1
echo "A/B rc=$? at $((SECONDS - START)) s"
python3 benchmarks/prototypes/ab_verdict.py $OUT/ab.txt --rows 30 --worst 6 | tee $OUT/verdict.txt
for i in 1 2 3 4 5 6 7 8; do
  timeout 60 python3 -m pytest -q tests/test_gpu.py -p no:cacheprovider -k "low_precision_module or flat_rows_cut" \
    >> $OUT/tests.txt 2>&1
  echo "tests $i rc=$? at $((SECONDS - START)) s"
  [ $((SECONDS - START)) -gt 390 ] && break
done
grep -h "passed\|failed" $OUT/tests.txt | tail -8
(cd $OUT && tar czf logs.tgz build*.txt device.txt && rm -f build*.txt device.txt)
