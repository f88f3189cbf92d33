#!/usr/bin/env bash
# Thirtieth session, call 3: multi_cta without its merge kernel where an instance has fewer than
# kMergeCtaChunks chunks (the apply's warps merge the partials: one kernel less in the call's chain).
# base = the committed file (unmerge_s34.patch reverses the working tree's change), merged = the tree.
# Bitwise A/B of the defaults (bitwise_ab.py) and of forced multi_cta, A/B of device time, the GPU suite.
#   run(command="bash benchmarks/prototypes/next_s34c.sh", timeout_s=600)
set -uo pipefail
START=$SECONDS
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 INSTANCE_NORM_REQUIRE_GPU=1 TORCH_EXTENSIONS_DIR=/tmp/ext MAX_JOBS=16
bash benchmarks/prototypes/patch_ab_build.sh base benchmarks/prototypes/unmerge_s34.patch || exit 1
echo "built at $((SECONDS - START)) s"
timeout 60 python3 benchmarks/prototypes/bitwise_ab.py /tmp/vab/base/instance_norm.py instance_norm.py > $OUT/bitwise.txt 2>&1
echo "bitwise rc=$? at $((SECONDS - START)) s"; tail -2 $OUT/bitwise.txt
python3 - > $OUT/bitwise_forced.txt 2>&1 <<'PY'
import importlib.util, torch
def load(path, name):
    s = importlib.util.spec_from_file_location(name, path); m = importlib.util.module_from_spec(s); s.loader.exec_module(m); m.load_extension(); return m
a, b = load("/tmp/vab/base/instance_norm.py", "fa"), load("instance_norm.py", "fb")
bad = 0
for shape in [(2, 8, 384, 384), (3, 5, 127, 129), (1, 3, 1000, 1001), (4, 6, 33, 35), (2, 2, 2000, 2000)]:
    for dt in (torch.float32, torch.bfloat16, torch.float16, torch.float64):
        x = torch.randn(shape, device="cuda", dtype=dt) * 2 + 1; dy = torch.randn_like(x)
        w = torch.randn(shape[1], device="cuda", dtype=dt); bb = torch.randn_like(w)
        ya, sa = a.forward_with_plan(x, w, bb, 1e-5, a.Plan.multi_cta()); yb, sb = b.forward_with_plan(x, w, bb, 1e-5, b.Plan.multi_cta())
        ga = a.backward_with_plan(dy, x, w, bb, sa, a.Plan.multi_cta()); gb = b.backward_with_plan(dy, x, w, bb, sb, b.Plan.multi_cta())
        ok = torch.equal(ya, yb) and torch.equal(sa, sb) and all(torch.equal(u, v) for u, v in zip(ga, gb))
        bad += not ok
        print(shape, dt, "same" if ok else "DIFFERENT")
print("forced multi_cta:", "all same" if bad == 0 else f"{bad} differ")
PY
tail -1 $OUT/bitwise_forced.txt
SH=2x8x384x384,3x16x400x400,1x8x640x640,2x4x704x704,1x8x1024x1024
timeout 200 python3 benchmarks/prototypes/pdl_ab_s21.py base=/tmp/vab/base/instance_norm.py merged=instance_norm.py \
  --rounds 2 --cases fwd,bwd --shapes $SH --dtypes float32,bfloat16 > $OUT/ab.txt 2>&1
echo "A/B rc=$? at $((SECONDS - START)) s"
python3 benchmarks/prototypes/ab_verdict.py $OUT/ab.txt --rows 20 --worst 5 | tee $OUT/verdict.txt
timeout $((590 - (SECONDS - START))) python3 -m pytest -q tests -p no:cacheprovider > $OUT/suite.txt 2>&1
echo "suite rc=$? at $((SECONDS - START)) s"; tail -2 $OUT/suite.txt
(cd $OUT && tar czf logs.tgz build*.txt device.txt && rm -f build*.txt device.txt)
