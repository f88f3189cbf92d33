#!/usr/bin/env bash
# Prepared in the twenty-fifth session for the next one's first device call (no carry):
#   run(command="bash benchmarks/prototypes/next_s30.sh", timeout_s=600)
# The stream backward at K=8 (not running ahead: the main float32 shape's stream(CS=16,S=1), and the
# 16-bit plain plans of few-instance shapes) refills its stage only after the sums and the CTA's
# reduction (ncu, sixth session: 47.7 % of its stall samples at the cluster exchange's wait, DRAM 71.7 %).
# ei (early_issue_s30.patch): a proxy fence and a barrier after the slice's loads, then the refill, then
# the math. ei2 (early_issue_split_s30.patch): each tensor's slice refilled once every thread has read it
# (a fence and a barrier per tensor; the stage's mbarrier takes the first tensor's bytes by expect_tx
# without arriving, the last tensor arrives). Locally (sass_cmp_s25.py): each changes only the six K=8
# stream backward kernels. Same bits expected (bitwise_ab.py first). A/B, 5 rounds; when a variant wins
# (ab_verdict.py, all 24 rows), the GPU suite on the better one; otherwise ncu of the three builds.
set -uo pipefail
START=$SECONDS
left() { local t=$(($1 - (SECONDS - START))); echo $((t > 5 ? t : 5)); }  # seconds to a deadline, at least 5
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 INSTANCE_NORM_REQUIRE_GPU=1 TORCH_EXTENSIONS_DIR=/tmp/ext MAX_JOBS=8
bash benchmarks/prototypes/patch_ab_build.sh ei benchmarks/prototypes/early_issue_s30.patch \
  ei2 benchmarks/prototypes/early_issue_split_s30.patch || exit 1
echo "built at $((SECONDS - START)) s"
timeout 60 python3 -c "
import torch, instance_norm as m
for s, d in [((112,64,512,512), torch.float32), ((8,32,512,512), torch.float32), ((32,3,224,224), torch.bfloat16),
             ((1,64,256,256), torch.bfloat16), ((8,24,224,224), torch.bfloat16), ((32,3,224,224), torch.float16)]:
    print(s, d, 'backward', m.chosen_plan(torch.empty(s, device='cuda', dtype=d), backward=True))
" > $OUT/plans.txt 2>&1; cat $OUT/plans.txt
for v in ei ei2; do
  timeout 60 python3 benchmarks/prototypes/bitwise_ab.py instance_norm.py /tmp/vab/$v/instance_norm.py > $OUT/bitwise_$v.txt 2>&1
  echo "$v $(tail -1 $OUT/bitwise_$v.txt)"
done
echo "bitwise at $((SECONDS - START)) s"
AB="base=instance_norm.py ei=/tmp/vab/ei/instance_norm.py ei2=/tmp/vab/ei2/instance_norm.py --rounds 5"
timeout 150 python3 benchmarks/prototypes/pdl_ab_s21.py $AB --cases bwd,bwdaff,train --dtypes float32 \
  --shapes 112x64x512x512,8x32x512x512 > $OUT/ab.txt 2>&1
timeout $(left 420) python3 benchmarks/prototypes/pdl_ab_s21.py $AB --cases bwd,bwdaff,train \
  --dtypes bfloat16,float16 --shapes 32x3x224x224,1x64x256x256,8x24x224x224 >> $OUT/ab.txt 2>&1
grep -v "^loaded" $OUT/ab.txt | cut -c1-175; echo "A/B done at $((SECONDS - START)) s"
python3 benchmarks/prototypes/ab_verdict.py $OUT/ab.txt --rows 24 --worst 3 --versus ei,ei2 | tee $OUT/verdict.txt
# The winner with the lower geomean (field 5 of "NAME: rows N geomean(graph) G ..."), same bits only.
BEST=$(for v in $(grep WINNER $OUT/verdict.txt | cut -d: -f1); do
         grep -q "all same" $OUT/bitwise_$v.txt && grep "^$v:" $OUT/verdict.txt; done | sort -t' ' -k5,5g | head -1 | cut -d: -f1)
if [ -n "$BEST" ]; then
  echo "suite on $BEST"; cp /tmp/vab/$BEST/instance_norm.py instance_norm.py; md5sum instance_norm.py | tee $OUT/suite_md5.txt
  timeout $(left 595) python3 -m pytest -q tests -p no:cacheprovider -x > $OUT/suite.txt 2>&1
  tail -3 $OUT/suite.txt
else
  # No winner: where each build's K=8 stream backward waits (main shape, float32, plain backward).
  mkdir -p $OUT/ncu
  for v in base:instance_norm.py ei:/tmp/vab/ei/instance_norm.py ei2:/tmp/vab/ei2/instance_norm.py; do
    [ $((SECONDS - START)) -lt 530 ] || { echo "ncu stopped: $((SECONDS - START)) s gone"; break; }
    timeout 50 ncu --clock-control none --profile-from-start off -k regex:stream_kernel --section LaunchStats \
      --section Occupancy --section SpeedOfLight --section WarpStateStats --section MemoryWorkloadAnalysis \
      python3 benchmarks/prototypes/ncu_aff_s27.py ${v#*:} 112 64 512 512 float32 plain > $OUT/ncu/main32_${v%%:*}.txt 2>&1
  done
  for f in $OUT/ncu/*.txt; do
    echo "== ${f##*/}"; grep -i "duration\|DRAM Throughput\|Warp Cycles Per Issued\|Achieved Occupancy\|Registers Per\|Stall" $f | cut -c1-120 | head -12
  done
  tar czf $OUT/ncu.tgz -C $OUT ncu; rm -rf $OUT/ncu
fi
echo "done at $((SECONDS - START)) s"
