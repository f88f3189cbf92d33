#!/usr/bin/env bash
# Thirtieth session, call 4: split_backward (multi_cta for the float32 backward's small second wave of large
# slices: 8 instances on 7 resident clusters of 16, 6+ vectors a thread). base = the committed file
# (unsplitb_s34.patch reverses the working tree's change), splitb = the tree. A/B on shapes outside the
# tune grid (3 picked, one picked from the grid, one not picked), then the GPU suite on the tree.
#   run(command="bash benchmarks/prototypes/next_s34d.sh", timeout_s=600)
set -uo pipefail
START=$SECONDS
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 INSTANCE_NORM_REQUIRE_GPU=1 TORCH_EXTENSIONS_DIR=/tmp/ext MAX_JOBS=16
bash benchmarks/prototypes/patch_ab_build.sh base benchmarks/prototypes/unsplitb_s34.patch || exit 1
echo "built at $((SECONDS - START)) s"
SH=1x8x480x480,2x4x464x464,1x8x500x500,1x8x512x512,1x8x416x416
python3 - $SH <<'PY' > $OUT/plans.txt 2>&1
import sys, importlib.util, torch
import instance_norm as new
s = importlib.util.spec_from_file_location("old", "/tmp/vab/base/instance_norm.py"); old = importlib.util.module_from_spec(s); s.loader.exec_module(old)
for t in sys.argv[1].split(","):
    x = torch.empty(tuple(int(v) for v in t.split("x")), device="cuda", dtype=torch.float32)
    print(t, "float32 backward old", old.chosen_plan(x, True), "new", new.chosen_plan(x, True))
PY
cat $OUT/plans.txt
timeout 150 python3 benchmarks/prototypes/pdl_ab_s21.py base=/tmp/vab/base/instance_norm.py splitb=instance_norm.py \
  --rounds 3 --cases bwd,bwdaff,train --shapes $SH --dtypes float32 > $OUT/ab.txt 2>&1
echo "A/B rc=$? at $((SECONDS - START)) s"
python3 benchmarks/prototypes/ab_verdict.py $OUT/ab.txt --rows 15 --worst 5 | tee $OUT/verdict.txt
timeout $((590 - (SECONDS - START))) python3 -m pytest -q tests -p no:cacheprovider > $OUT/suite.txt 2>&1
echo "suite rc=$? at $((SECONDS - START)) s"; tail -2 $OUT/suite.txt
(cd $OUT && tar czf logs.tgz build*.txt device.txt && rm -f build*.txt device.txt)
