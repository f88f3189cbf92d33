#!/usr/bin/env bash
# Thirty-fourth session, call 5: is the training step's A/B sensitive to which module a build is loaded
# as, with no code difference? (s38/call3: spanfwd, which changes only the forward's span path, took
# 0.886x in the bf16 training step at (1024,256,2,2), whose forward runs the unchanged rows.) The same
# file loaded as four modules (same1..same3 are copies with a Python comment added: the same extension).
#   run(command="bash benchmarks/prototypes/next_s38f.sh", timeout_s=280)
set -uo pipefail
source benchmarks/prototypes/device_base.sh
for n in 1 2 3; do mkdir -p /tmp/same$n && { cat instance_norm.py; echo "# copy $n"; } > /tmp/same$n/instance_norm.py; done
SH=1024x256x4x4,1024x256x2x2,2048x256x3x4,16x256x12x12
timeout 100 python3 benchmarks/prototypes/pdl_ab_s21.py base=instance_norm.py same1=/tmp/same1/instance_norm.py \
  same2=/tmp/same2/instance_norm.py same3=/tmp/same3/instance_norm.py --rounds 3 --cases train --shapes $SH \
  --dtypes float32,bfloat16 > $OUT/ab.txt 2>&1
echo "A/B rc=$? at $((SECONDS - START)) s"
python3 benchmarks/prototypes/ab_verdict.py $OUT/ab.txt --rows 8 --worst 6 | tee $OUT/verdict.txt
(cd $OUT && tar czf logs.tgz build*.txt device.txt && rm -f build*.txt device.txt)
