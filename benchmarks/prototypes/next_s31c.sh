#!/usr/bin/env bash
# Prepared in the twenty-sixth session (no carry):
#   run(command="bash benchmarks/prototypes/next_s31c.sh", timeout_s=600)
# eis (early_issue_each_s31.patch): the float32 K=8 stream backward (eif, landed) with one mbarrier per
# tensor, so that x is taken and its buffer refilled while dy still lands, then dy's: the SM keeps a copy
# in flight while it reads the stage (eif's ncu: DRAM 81 %; the 128 KB stage's shared-memory read, about
# 0.5 us, is an estimated part of the 0.6 us an instance it loses to the floor). Locally: only the two
# float32 K=8 stream backward kernels change.
# lf16 (late_fence16_s31.patch): the 16-bit K=8 stream backward's late refill gets the proxy fence the
# PTX memory model asks for (a review: formally missing; CUTLASS's consumer release has none either).
# Locally: only the four 16-bit K=8 stream backward kernels change. Landed if neutral.
# Same bits first; A/B 5 rounds; the verdict per variant. The suite waits for the next call (with rc's
# result: next_s31b.sh), since eis and lf16 touch neighbouring lines (merge by hand if both land).
set -uo pipefail
START=$SECONDS
left() { local t=$(($1 - (SECONDS - START))); echo $((t > 5 ? t : 5)); }  # seconds to a deadline, at least 5
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 INSTANCE_NORM_REQUIRE_GPU=1 TORCH_EXTENSIONS_DIR=/tmp/ext MAX_JOBS=8
bash benchmarks/prototypes/patch_ab_build.sh eis benchmarks/prototypes/early_issue_each_s31.patch \
  lf16 benchmarks/prototypes/late_fence16_s31.patch || exit 1
echo "built at $((SECONDS - START)) s"
for v in eis lf16; do
  timeout 150 python3 benchmarks/prototypes/bitwise_ab.py instance_norm.py /tmp/vab/$v/instance_norm.py > $OUT/bitwise_$v.txt 2>&1
  echo "$v $(tail -1 $OUT/bitwise_$v.txt)"
done
echo "bitwise at $((SECONDS - START)) s"
timeout 60 python3 -c "
import torch, instance_norm as m
for s, d in [((112,64,512,512), torch.float32), ((8,32,512,512), torch.float32), ((16,16,448,448), torch.float32),
             ((2,8,384,384), torch.float32), ((32,3,224,224), torch.bfloat16), ((1,64,256,256), torch.float16),
             ((8,24,224,224), torch.bfloat16)]:
    print(s, d, 'backward', m.chosen_plan(torch.empty(s, device='cuda', dtype=d), backward=True))
" > $OUT/plans.txt 2>&1; cat $OUT/plans.txt
AB="--rounds 5"
timeout 200 python3 benchmarks/prototypes/pdl_ab_s21.py base=instance_norm.py eis=/tmp/vab/eis/instance_norm.py $AB \
  --cases bwd,bwdaff,train --dtypes float32 --shapes 112x64x512x512,8x32x512x512,16x16x448x448,2x8x384x384 > $OUT/ab_eis.txt 2>&1
timeout $(left 585) python3 benchmarks/prototypes/pdl_ab_s21.py base=instance_norm.py lf16=/tmp/vab/lf16/instance_norm.py $AB \
  --cases bwd,bwdaff,train --dtypes bfloat16,float16 --shapes 32x3x224x224,1x64x256x256,8x24x224x224 > $OUT/ab_lf16.txt 2>&1
grep -hv "^loaded" $OUT/ab_eis.txt $OUT/ab_lf16.txt | cut -c1-150; echo "A/B done at $((SECONDS - START)) s"
python3 benchmarks/prototypes/ab_verdict.py $OUT/ab_eis.txt --rows 12 --worst 3 | tee $OUT/verdict.txt
python3 benchmarks/prototypes/ab_verdict.py $OUT/ab_lf16.txt --rows 18 --worst 3 | tee -a $OUT/verdict.txt
(cd $OUT && tar czf logs.tgz build*.txt device.txt plans.txt && rm -f build*.txt plans.txt)  # about 8 files come back
echo "done at $((SECONDS - START)) s"
