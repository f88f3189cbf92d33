#!/usr/bin/env bash
# Twenty-eighth session, call 4 (no carry): the forward's wide-plan rule (wide_s32.patch: wide_forward,
# from call 2's grid) on top of kev (applied to instance_norm.py). Builds base and variant; the wide
# tests on base (their first GPU run) and test_chosen_plans + the wide tests on a patched copy of the
# repository; same bits where the plan is unchanged; the plans picked; A/B fwd + act, both dtypes, at
# 6 picked and 2 unpicked shapes, 5 rounds; the verdict.
set -uo pipefail
START=$SECONDS
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 INSTANCE_NORM_REQUIRE_GPU=1 TORCH_EXTENSIONS_DIR=/tmp/ext MAX_JOBS=8
P=benchmarks/prototypes/wide_s32.patch
bash benchmarks/prototypes/patch_ab_build.sh wide $P || exit 1
echo "built at $((SECONDS - START)) s"
timeout 120 python3 -m pytest -q -x tests/test_epilogue.py tests/test_gpu.py -k "wide_stream or stream_wide" > $OUT/tests_base.txt 2>&1
echo "base wide tests: $(tail -1 $OUT/tests_base.txt)"
rm -rf /tmp/wrepo && cp -r . /tmp/wrepo && (cd /tmp/wrepo && git apply $P && PYTHONPATH=/tmp/wrepo timeout 150 python3 -m pytest -q \
  tests/test_epilogue.py tests/test_gpu.py -k "wide_stream or stream_wide or chosen_plans or plan_stream" > $OUT/tests_wide.txt 2>&1)
echo "wide tests: $(tail -1 $OUT/tests_wide.txt)"
timeout 150 python3 benchmarks/prototypes/bitwise_ab.py instance_norm.py /tmp/vab/wide/instance_norm.py > $OUT/bitwise_wide.txt 2>&1
echo "wide $(tail -1 $OUT/bitwise_wide.txt)"
SH=1x8x512x512,1x16x320x320,1x24x320x320,2x8x384x384,1x24x512x512,1x16x448x448,4x8x512x512,1x32x384x384
timeout 60 python3 -c "
import importlib.util, torch
s = importlib.util.spec_from_file_location('w', '/tmp/vab/wide/instance_norm.py'); m = importlib.util.module_from_spec(s); s.loader.exec_module(m)
import instance_norm as b
for t in '$SH'.split(','):
    shape = tuple(int(v) for v in t.split('x'))
    for d in (torch.float32, torch.bfloat16):
        x = torch.empty(shape, device='cuda', dtype=d)
        print(shape, d, 'base', b.chosen_plan(x), 'wide', m.chosen_plan(x))
" > $OUT/plans.txt 2>&1; cat $OUT/plans.txt
echo "A/B from $((SECONDS - START)) s"
timeout $((585 - (SECONDS - START))) python3 benchmarks/prototypes/pdl_ab_s21.py base=instance_norm.py wide=/tmp/vab/wide/instance_norm.py \
  --rounds 5 --cases fwd,act --dtypes float32,bfloat16 --shapes $SH > $OUT/ab.txt 2>&1
grep -v "^loaded" $OUT/ab.txt | cut -c1-150; echo "A/B done at $((SECONDS - START)) s"
python3 benchmarks/prototypes/ab_verdict.py $OUT/ab.txt --rows 32 --worst 4 | tee $OUT/verdict.txt
(cd $OUT && tar czf logs.tgz build*.txt device.txt tests_*.txt && rm -f build*.txt device.txt)
