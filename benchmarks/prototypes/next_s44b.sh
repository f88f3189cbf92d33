#!/usr/bin/env bash
# Fortieth session, call 2 (prepared in the thirty-ninth; builds checked locally, not run on a GPU). The affine
# gradients' sums over the batch in two passes (rowsum): channel_rows_kernel, CTAs over contiguous batch rows
# reading whole rows of every channel into per-CTA partials, then channel_sums_kernel over the partials (a fixed
# order: deterministic). rowsum512 / rowsum2048: from a batch of 512 / 2048 rows, up to 1024 channels. The *_full
# patches include nb4k_mends2_s43.patch (comments, the narrow slices loop as a static_assert, test comments). The
# one-pass reduction reads 8 MB of sums in 9.9 us at (4096,256,2,2) fp32 (0.8 TB/s; s43/call1). A/B on the affine
# backward and training step (running statistics unchanged: not timed), then the suite on rowsum512 if it wins with
# no consistent loss, else on rowsum2048 if that does, else on nb4k_mends2 alone. Land the patch the suite ran on.
#   run(command="bash benchmarks/prototypes/next_s44b.sh", timeout_s=600)
set -uo pipefail
P=benchmarks/prototypes
source $P/ab_env.sh rs512 $P/rowsum512_full_s43.patch rs2048 $P/rowsum2048_full_s43.patch
SH=4096x256x2x2,1024x256x4x4,1024x256x7x7,512x64x8x8,8192x32x2x2,2048x512x2x2,4096x64x4x4,600x256x12x12
timeout 200 python3 $P/pdl_ab_s21.py base=instance_norm.py rs512=/tmp/vab/rs512/instance_norm.py \
  rs2048=/tmp/vab/rs2048/instance_norm.py --rounds 2 --cases bwdaff,train --shapes $SH \
  --dtypes float32,bfloat16 > $OUT/ab.txt 2>&1
echo "A/B rc=$? at $((SECONDS - START)) s"
python3 $P/ab_verdict.py $OUT/ab.txt --rows 32 --worst 8 | tee $OUT/verdict.txt
SUITE=$P/nb4k_mends2_s43.patch
if grep -E "^rs512:" $OUT/verdict.txt | grep -q "consistent losses 0 WINNER"; then SUITE=$P/rowsum512_full_s43.patch
elif grep -E "^rs2048:" $OUT/verdict.txt | grep -q "consistent losses 0 WINNER"; then SUITE=$P/rowsum2048_full_s43.patch; fi
source $P/suite_with_patch.sh $SUITE 595
