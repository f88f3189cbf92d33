#!/usr/bin/env bash
# Prepared in the twenty-fifth session: why rc (host_reciprocal_s29.patch: instance size and reciprocal
# in Params) lost 1.5 % at the main float32 backward (6239 -> 6339 us graph, s29/call4) while gaining
# 0.989 at small shapes. rcl (params_layout_s30.patch) adds rc's two Params fields and fills them but
# no kernel reads them: locally 256 of 261 kernels' SASS differ (constant-bank offsets), the float32 K=8
# stream backward keeps its length (2224 SASS instructions, NOPs included). If rcl loses like rc, the loss is the layout, not
# the reciprocal. Run after next_s30.sh (rebase the patches if ei landed). 5 rounds.
#   run(command="bash benchmarks/prototypes/next_s30c.sh", timeout_s=600)
set -uo pipefail
START=$SECONDS
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 INSTANCE_NORM_REQUIRE_GPU=1 TORCH_EXTENSIONS_DIR=/tmp/ext MAX_JOBS=8
bash benchmarks/prototypes/patch_ab_build.sh rc benchmarks/prototypes/host_reciprocal_s29.patch \
  rcl benchmarks/prototypes/params_layout_s30.patch || exit 1
echo "built at $((SECONDS - START)) s"
AB="base=instance_norm.py rc=/tmp/vab/rc/instance_norm.py rcl=/tmp/vab/rcl/instance_norm.py --rounds 5"
timeout 200 python3 benchmarks/prototypes/pdl_ab_s21.py $AB --cases fwd,bwd,bwdaff --dtypes float32 \
  --shapes 112x64x512x512 > $OUT/ab.txt 2>&1
timeout 120 python3 benchmarks/prototypes/pdl_ab_s21.py $AB --cases fwd,bwd --dtypes float32,bfloat16 \
  --shapes 8x512x32x32,1x16x64x64 >> $OUT/ab.txt 2>&1
grep -v "^loaded" $OUT/ab.txt | cut -c1-175
python3 benchmarks/prototypes/ab_verdict.py $OUT/ab.txt --worst 3 --versus rc,rcl | tee $OUT/verdict.txt
echo "done at $((SECONDS - START)) s"
