#!/usr/bin/env bash
# Forty-second session, call 4. s42/call3 (step_kernels.py): the affine gradients' channel sums took 13.04 us of
# the fp32 training step at (4096, 256, 2, 2) (backward kernel 12.66 us), 4.68 us at (1024, 256, 4, 4): 32 CTAs
# (a tile of 8 channels each) for 8 MB of sums. bsplit_s42.patch splits each tile's batch over a cluster of
# up to 8 CTAs (kBatchSumSplitRows 2); bsplit8 the same with 8 rows a thread at least. A/B on the per-channel
# cases (bwdaff: dweight/dbias; train; run: the running statistics), then the suite on bsplit_s42.patch.
#   run(command="bash benchmarks/prototypes/next_s42d.sh", timeout_s=560)
set -uo pipefail
P=benchmarks/prototypes
source $P/ab_env.sh bsplit $P/bsplit_s42.patch bsplit8 $P/bsplit8_s42.patch
SH=4096x256x2x2,1024x256x4x4,1024x256x7x7,512x64x8x8,128x512x16x16,256x64x32x32
timeout 150 python3 $P/pdl_ab_s21.py base=instance_norm.py bsplit=/tmp/vab/bsplit/instance_norm.py \
  bsplit8=/tmp/vab/bsplit8/instance_norm.py --rounds 2 --cases bwdaff,train,run --shapes $SH \
  --dtypes float32,bfloat16 > $OUT/ab.txt 2>&1
echo "A/B rc=$? at $((SECONDS - START)) s"
python3 $P/ab_verdict.py $OUT/ab.txt --rows 36 --worst 8 | tee $OUT/verdict.txt
source $P/suite_with_patch.sh $P/bsplit_s42.patch 555
