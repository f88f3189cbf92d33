#!/usr/bin/env bash
# Prepared in the twenty-fourth session: ske, the stream kernel's backward asking for the instance's
# coefficients (saved statistics: global loads) before it waits on the slice's bulk copy instead of after
# (prototypes/stream_known_early_s29.patch, against the file of commit fc7e9b3). Why: lfb's reordered
# Backward::known alone took the float32 main-shape backward (the stream kernel) from 6470 to 6238 us
# (0.964), so the per-instance prologue sits on that kernel's critical path; in the base's SASS the two
# statistics loads follow the mbarrier wait (SYNCS.PHASECHK.TRANS64.TRYWAIT) and the first partial sum
# waits on them. sass_cmp_s25.py (locally): only the 12 stream backward kernels differ; the loads now
# precede the wait. A/B on the stream kernel's rows: the main shape and (4,128,128,128) float32 (plans:
# stream), bwd / bwdaff / train, float32 and bfloat16. Rule: geomean <= 0.99 and no consistent loss.
#   run(command="bash benchmarks/prototypes/next_s29d.sh", timeout_s=600)
set -uo pipefail
START=$SECONDS
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 INSTANCE_NORM_REQUIRE_GPU=1 TORCH_EXTENSIONS_DIR=/tmp/ext MAX_JOBS=8
bash benchmarks/prototypes/patch_ab_build.sh ske benchmarks/prototypes/stream_known_early_s29.patch || exit 1
echo "built at $((SECONDS - START)) s"
python3 -c "
import torch, instance_norm as m
for s in [(112,64,512,512), (4,128,128,128), (16,64,256,256), (1,2,4096,4096)]:
    for d in (torch.float32, torch.bfloat16):
        print(s, d, 'backward', m.chosen_plan(torch.empty(s, device='cuda', dtype=d), backward=True))
" > $OUT/plans.txt 2>&1; cat $OUT/plans.txt
timeout $((560 - (SECONDS - START))) python3 benchmarks/prototypes/pdl_ab_s21.py base=instance_norm.py ske=/tmp/vab/ske/instance_norm.py \
  --rounds 5 --cases bwd,bwdaff,train --dtypes float32,bfloat16 --shapes 112x64x512x512,4x128x128x128,16x64x256x256 > $OUT/ab.txt 2>&1
grep -v "^loaded" $OUT/ab.txt | cut -c1-170; echo "done at $((SECONDS - START)) s"
