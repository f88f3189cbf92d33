#!/usr/bin/env bash
# Forty-third session, call 1. The affine gradients' channel sums take 13.04 us of the fp32 training step at
# (4096, 256, 2, 2) and 4.68 us at (1024, 256, 4, 4) (s42/call3, step_kernels.py): 32 CTAs of 1024 threads (tiles
# of 8 channels) for 8 MB / 2 MB of sums. The cluster split (bsplit_s42.patch) lost (s42/call4). Three variants
# without clusters: unroll8 (each thread's batch loop unrolled 8 deep, not 4: more loads in flight), narrow
# (tiles of 2 channels where tiles of 8 fill under half the SMs: 4x the CTAs), narrow8 (both). A/B on the
# per-channel cases (bwdaff: dweight/dbias; train; run: the running statistics), then narrow8 in the tree for
# test_batch_sums and step_kernels.py's per-kernel times.
#   run(command="bash benchmarks/prototypes/next_s43a.sh", timeout_s=560)
set -uo pipefail
P=benchmarks/prototypes
source $P/ab_env.sh unroll8 $P/unroll8_s43.patch narrow $P/narrow_s43.patch narrow8 $P/narrow8_s43.patch
SH=4096x256x2x2,1024x256x4x4,1024x256x7x7,512x64x8x8,128x512x16x16,256x64x32x32
timeout 260 python3 $P/pdl_ab_s21.py base=instance_norm.py unroll8=/tmp/vab/unroll8/instance_norm.py \
  narrow=/tmp/vab/narrow/instance_norm.py narrow8=/tmp/vab/narrow8/instance_norm.py --rounds 2 \
  --cases bwdaff,train,run --shapes $SH --dtypes float32,bfloat16 > $OUT/ab.txt 2>&1
echo "A/B rc=$? at $((SECONDS - START)) s"
python3 $P/ab_verdict.py $OUT/ab.txt --rows 36 --worst 8 | tee $OUT/verdict.txt
git apply $P/narrow8_s43.patch && trap 'git apply -R $P/narrow8_s43.patch' EXIT
md5sum instance_norm.py tests/*.py > $OUT/md5.txt
timeout 120 python3 -m pytest -q tests/test_training.py -k "batch_sums" -p no:cacheprovider > $OUT/tests.txt 2>&1
echo "test_batch_sums rc=$? at $((SECONDS - START)) s"; tail -2 $OUT/tests.txt
for d in float32 bfloat16; do
  timeout 90 python3 benchmarks/step_kernels.py --module ours --dtype $d --shapes 4096x256x2x2,1024x256x4x4 \
    >> $OUT/step_kernels.txt 2>&1
done
echo "done at $((SECONDS - START)) s"; grep -E "sums|graph replay" $OUT/step_kernels.txt
(cd $OUT && tar czf logs.tgz build*.txt device.txt && rm -f build*.txt device.txt)
