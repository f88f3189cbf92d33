#!/usr/bin/env bash
# Twenty-ninth session: split_forward (multi_cta for the forward where the K = 8 stream plan runs more
# than a wave of small or uneven slices) on shapes outside the grid it was fitted on (next_s33d.sh), then
# the GPU suite on the working tree. base = the committed file (unsplit_s33.patch reverses the working
# tree's instance_norm.py changes), split = the working tree.
#   run(command="bash benchmarks/prototypes/next_s33e.sh", timeout_s=600)
set -uo pipefail
START=$SECONDS
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 INSTANCE_NORM_REQUIRE_GPU=1 TORCH_EXTENSIONS_DIR=/tmp/ext MAX_JOBS=16
bash benchmarks/prototypes/patch_ab_build.sh base benchmarks/prototypes/unsplit_s33.patch || exit 1
echo "built at $((SECONDS - START)) s"
SH=2x10x384x384,1x40x352x352,4x12x416x416,1x40x288x288,2x40x480x480,1x20x480x480,1x100x256x256
python3 - $SH <<'PY' > $OUT/plans.txt 2>&1
import sys, importlib.util, torch
import instance_norm as new
s = importlib.util.spec_from_file_location("old", "/tmp/vab/base/instance_norm.py"); old = importlib.util.module_from_spec(s); s.loader.exec_module(old)
print("L2 bytes", torch.cuda.get_device_properties(0).L2_cache_size)
for t in sys.argv[1].split(","):
    for dt in (torch.float32, torch.bfloat16):
        x = torch.empty(tuple(int(v) for v in t.split("x")), device="cuda", dtype=dt)
        print(t, dt, "old", old.chosen_plan(x), "new", new.chosen_plan(x))
PY
cat $OUT/plans.txt
timeout 220 python3 benchmarks/prototypes/pdl_ab_s21.py base=/tmp/vab/base/instance_norm.py split=instance_norm.py \
  --rounds 3 --cases fwd,act,train --shapes $SH --dtypes float32,bfloat16 > $OUT/ab.txt 2>&1
echo "A/B rc=$? at $((SECONDS - START)) s"
python3 benchmarks/prototypes/ab_verdict.py $OUT/ab.txt --rows 42 --worst 5 | tee $OUT/verdict.txt
timeout $((590 - (SECONDS - START))) python3 -m pytest -q tests -p no:cacheprovider -x > $OUT/suite.txt 2>&1
echo "suite rc=$? at $((SECONDS - START)) s"; tail -3 $OUT/suite.txt
(cd $OUT && tar czf logs.tgz build*.txt device.txt && rm -f build*.txt device.txt)
