#!/usr/bin/env bash
# Prepared in the twenty-sixth session after call 1 (benchmarks/results_h200/s30/call1):
#   run(command="bash benchmarks/prototypes/next_s30b.sh", timeout_s=600)
# ei (the stream backward at K=8 refilling its stage before the sums) took the main float32 backward from
# 6230 to 5788 us (graph replay) but cost 2-7 % on the small 16-bit rows (the extra barrier). Two restricted
# forms: eir (early_issue_eir_s30.patch) takes the fence and barrier only where a refill follows
# (instance_of(iteration + stages) exists: the same for the whole cluster); eif (early_issue_eif_s30.patch)
# does ei in the float32 kernels only. Same 24 rows; the suite on the better winner; no ncu this time.
set -uo pipefail
START=$SECONDS
left() { local t=$(($1 - (SECONDS - START))); echo $((t > 5 ? t : 5)); }  # seconds to a deadline, at least 5
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 INSTANCE_NORM_REQUIRE_GPU=1 TORCH_EXTENSIONS_DIR=/tmp/ext MAX_JOBS=8
bash benchmarks/prototypes/patch_ab_build.sh eir benchmarks/prototypes/early_issue_eir_s30.patch \
  eif benchmarks/prototypes/early_issue_eif_s30.patch || exit 1
echo "built at $((SECONDS - START)) s"
timeout 60 python3 -c "
import torch, instance_norm as m
for s, d in [((112,64,512,512), torch.float32), ((8,32,512,512), torch.float32), ((32,3,224,224), torch.bfloat16),
             ((1,64,256,256), torch.bfloat16), ((8,24,224,224), torch.bfloat16), ((32,3,224,224), torch.float16)]:
    print(s, d, 'backward', m.chosen_plan(torch.empty(s, device='cuda', dtype=d), backward=True))
" > $OUT/plans.txt 2>&1; cat $OUT/plans.txt
for v in eir eif; do
  timeout 60 python3 benchmarks/prototypes/bitwise_ab.py instance_norm.py /tmp/vab/$v/instance_norm.py > $OUT/bitwise_$v.txt 2>&1
  echo "$v $(tail -1 $OUT/bitwise_$v.txt)"
done
echo "bitwise at $((SECONDS - START)) s"
AB="base=instance_norm.py eir=/tmp/vab/eir/instance_norm.py eif=/tmp/vab/eif/instance_norm.py --rounds 5"
timeout 150 python3 benchmarks/prototypes/pdl_ab_s21.py $AB --cases bwd,bwdaff,train --dtypes float32 \
  --shapes 112x64x512x512,8x32x512x512 > $OUT/ab.txt 2>&1
timeout $(left 420) python3 benchmarks/prototypes/pdl_ab_s21.py $AB --cases bwd,bwdaff,train \
  --dtypes bfloat16,float16 --shapes 32x3x224x224,1x64x256x256,8x24x224x224 >> $OUT/ab.txt 2>&1
grep -v "^loaded" $OUT/ab.txt | cut -c1-175; echo "A/B done at $((SECONDS - START)) s"
python3 benchmarks/prototypes/ab_verdict.py $OUT/ab.txt --rows 24 --worst 3 --versus eir,eif | tee $OUT/verdict.txt
# The winner with the lower geomean (field 5 of "NAME: rows N geomean(graph) G ..."), same bits only.
BEST=$(for v in $(grep WINNER $OUT/verdict.txt | cut -d: -f1); do
         grep -q "all same" $OUT/bitwise_$v.txt && grep "^$v:" $OUT/verdict.txt; done | sort -t' ' -k5,5g | head -1 | cut -d: -f1)
if [ -n "$BEST" ]; then
  echo "suite on $BEST"; cp /tmp/vab/$BEST/instance_norm.py instance_norm.py; md5sum instance_norm.py | tee $OUT/suite_md5.txt
  timeout $(left 595) python3 -m pytest -q tests -p no:cacheprovider -x > $OUT/suite.txt 2>&1
  tail -3 $OUT/suite.txt
else
  echo "no winner"
fi
echo "done at $((SECONDS - START)) s"
