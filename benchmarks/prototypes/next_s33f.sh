#!/usr/bin/env bash
# Twenty-ninth session: split_forward's final rule (small slices in more than one wave; the uneven-slice
# part dropped after next_s33e.sh) on 6 more shapes outside the grid, larger tensors included (up to
# 128 instances, 75 MB), then the GPU suite on the working tree, then bench.py's peers at two picked shapes.
# base = the committed file (unsplit_s33.patch reverses the working tree's changes), split = the tree.
#   run(command="bash benchmarks/prototypes/next_s33f.sh", timeout_s=600)
set -uo pipefail
START=$SECONDS
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 INSTANCE_NORM_REQUIRE_GPU=1 TORCH_EXTENSIONS_DIR=/tmp/ext MAX_JOBS=16
bash benchmarks/prototypes/patch_ab_build.sh base benchmarks/prototypes/unsplit_s33.patch || exit 1
echo "built at $((SECONDS - START)) s"
SH=3x16x400x400,1x128x384x384,2x64x300x300,1x64x400x400,1x128x416x416,1x24x352x352
python3 - $SH <<'PY' > $OUT/plans.txt 2>&1
import sys, importlib.util, torch
import instance_norm as new
s = importlib.util.spec_from_file_location("old", "/tmp/vab/base/instance_norm.py"); old = importlib.util.module_from_spec(s); s.loader.exec_module(old)
for t in sys.argv[1].split(","):
    for dt in (torch.float32, torch.bfloat16):
        x = torch.empty(tuple(int(v) for v in t.split("x")), device="cuda", dtype=dt)
        print(t, dt, "old", old.chosen_plan(x), "new", new.chosen_plan(x))
PY
cat $OUT/plans.txt
timeout 170 python3 benchmarks/prototypes/pdl_ab_s21.py base=/tmp/vab/base/instance_norm.py split=instance_norm.py \
  --rounds 3 --cases fwd,act --shapes $SH --dtypes float32,bfloat16 > $OUT/ab.txt 2>&1
echo "A/B rc=$? at $((SECONDS - START)) s"
python3 benchmarks/prototypes/ab_verdict.py $OUT/ab.txt --rows 24 --worst 5 | tee $OUT/verdict.txt
timeout 200 python3 -m pytest -q tests -p no:cacheprovider > $OUT/suite.txt 2>&1
echo "suite rc=$? at $((SECONDS - START)) s"; tail -2 $OUT/suite.txt
timeout $((590 - (SECONDS - START))) python3 benchmarks/bench.py --shapes 2x8x384x384,4x12x416x416 --dtypes float32,bfloat16 \
  --out $OUT/bench > $OUT/bench.txt 2>&1
echo "bench rc=$? at $((SECONDS - START)) s"; grep -B2 -A12 "CUDA-graph replay" $OUT/bench.txt | head -40
rm -f $OUT/bench/bandwidth.png
(cd $OUT && tar czf logs.tgz build*.txt device.txt && rm -f build*.txt device.txt)
