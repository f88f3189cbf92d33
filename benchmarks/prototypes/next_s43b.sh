#!/usr/bin/env bash
# Forty-third session, call 2. s43/call1: tiles of 2 channels (narrow) won at (4096,256,2,2) (graph: train fp32
# 0.93x, bwdaff 0.91x, run 0.83x) but lost at N 512-1024 (up to 1.50x, bf16 (512,64,8,8) bwdaff); unroll8 changed
# nothing. nb2k / nb4k: narrow only from a batch of 2048 / 4096 rows. A/B on large batches (and a control at
# N 1024, unchanged code path), then the suite on nb2k if it has no consistent loss, else on nb4k if that has
# none, else no suite.
#   run(command="bash benchmarks/prototypes/next_s43b.sh", timeout_s=600)
set -uo pipefail
P=benchmarks/prototypes
source $P/ab_env.sh nb2k $P/nb2k_s43.patch nb4k $P/nb4k_s43.patch
SH=4096x256x2x2,2048x256x3x4,2048x128x4x4,4096x64x4x4,8192x32x2x2,2048x512x2x2,1024x256x4x4
timeout 200 python3 $P/pdl_ab_s21.py base=instance_norm.py nb2k=/tmp/vab/nb2k/instance_norm.py \
  nb4k=/tmp/vab/nb4k/instance_norm.py --rounds 2 --cases bwdaff,train,run --shapes $SH \
  --dtypes float32,bfloat16 > $OUT/ab.txt 2>&1
echo "A/B rc=$? at $((SECONDS - START)) s"
python3 $P/ab_verdict.py $OUT/ab.txt --rows 42 --worst 8 | tee $OUT/verdict.txt
SUITE=
if grep -E "^nb2k:" $OUT/verdict.txt | grep -q "consistent losses 0 "; then SUITE=$P/nb2k_s43.patch
elif grep -E "^nb4k:" $OUT/verdict.txt | grep -q "consistent losses 0 "; then SUITE=$P/nb4k_s43.patch; fi
if [ -n "$SUITE" ]; then source $P/suite_with_patch.sh $SUITE 595
else echo "no suite: both lose somewhere"; (cd $OUT && tar czf logs.tgz build*.txt device.txt && rm -f build*.txt device.txt); fi
