#!/usr/bin/env bash
# Forty-third session, call 3. nb4k landed (802ce54): tiles of 2 channels from N 4096 where tiles of 8 fill under
# half the SMs. Untested there: C 512 (64 tiles) and 384 (48), where nb2k lost at N 2048 (C 512, up to 1.22x).
# nb4kq: narrow only where tiles of 8 fill under a quarter of the SMs (C up to 256 on the H200), with the comments'
# figures and test_batch_sums' (4100, 40). A/B where the two differ (C 512, 384 at N 4096) and a control where both
# are narrow (8192x256), then the suite on nb4kq if it wins with no consistent loss.
#   run(command="bash benchmarks/prototypes/next_s43c.sh", timeout_s=560)
set -uo pipefail
P=benchmarks/prototypes
source $P/ab_env.sh nb4kq $P/nb4kq_s43.patch
SH=4096x512x2x2,4096x384x2x2,8192x256x2x2
timeout 120 python3 $P/pdl_ab_s21.py base=instance_norm.py nb4kq=/tmp/vab/nb4kq/instance_norm.py --rounds 2 \
  --cases bwdaff,train,run --shapes $SH --dtypes float32,bfloat16 > $OUT/ab.txt 2>&1
echo "A/B rc=$? at $((SECONDS - START)) s"
python3 $P/ab_verdict.py $OUT/ab.txt --rows 18 --worst 8 | tee $OUT/verdict.txt
if grep -E "^nb4kq:" $OUT/verdict.txt | grep -q "consistent losses 0 WINNER"; then
  source $P/suite_with_patch.sh $P/nb4kq_s43.patch 555
else echo "no suite: nb4kq does not win"; (cd $OUT && tar czf logs.tgz build*.txt device.txt && rm -f build*.txt device.txt); fi
