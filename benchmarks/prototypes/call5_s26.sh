#!/usr/bin/env bash
# Twenty-second session, fifth call: CTA size of the onchip plans with G < 128 (kSmallGroupBlock, 256
# threads = 8 instances of a warp), A/B/n against 32, 64 and 128 (onchip_block = max(kSmallGroupBlock, G)).
# Inductor's small-shape kernels run 32-64-thread CTAs; ours load, reduce and store in lockstep per CTA.
# Then, if one variant wins on every row (graph replay geomean <= 0.98, no row above 1.02), the full GPU
# suite on it (copied over instance_norm.py in the device's working copy only).
set -uo pipefail
START=$SECONDS
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 INSTANCE_NORM_REQUIRE_GPU=1 TORCH_EXTENSIONS_DIR=/tmp/ext MAX_JOBS=4
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv; md5sum instance_norm.py .scratch/vS*.py; } > $OUT/device.txt 2>&1
cp instance_norm.py .scratch/base.py
for v in base vS32 vS64 vS128; do
  python3 -c "import importlib.util; s=importlib.util.spec_from_file_location('$v','.scratch/$v.py'); m=importlib.util.module_from_spec(s); s.loader.exec_module(m); m.load_extension()" > $OUT/build_$v.txt 2>&1 &
done
wait; echo "built at $((SECONDS - START)) s"
AB="timeout 100 python3 benchmarks/prototypes/pdl_ab_s21.py base=.scratch/base.py vS32=.scratch/vS32.py vS64=.scratch/vS64.py vS128=.scratch/vS128.py --rounds 3"
{
$AB --cases fwd,train --dtypes float32,bfloat16 --shapes 8x512x32x32,32x256x32x32
$AB --cases fwd,train --dtypes bfloat16,float16 --shapes 16x256x64x64
$AB --cases act,acttrain --dtypes bfloat16 --shapes 8x512x32x32
} > $OUT/ab.txt 2>&1
grep -v "^loaded" $OUT/ab.txt | cut -c1-200; echo "ab done at $((SECONDS - START)) s"
WIN=$(python3 - <<'PY'
import math, re
rows = [l for l in open("/dev/stdin" if False else __import__("os").environ["OUT"] + "/ab.txt") if "/base" in l]
best = ""
score = {}
for v in ("vS32", "vS64", "vS128"):
    r = [float(m.group(1)) for l in rows for m in [re.search(v + r"/base [0-9.]+/([0-9.]+)", l)] if m]
    if r:
        g = math.exp(sum(map(math.log, r)) / len(r))
        score[v] = (g, max(r))
ok = {v: s for v, s in score.items() if s[0] <= 0.98 and s[1] <= 1.02}
print(min(ok, key=lambda v: ok[v][0]) if ok else "")
import sys; print(score, file=sys.stderr)
PY
)
echo "winner: '${WIN}'"
if [ -n "$WIN" ]; then
  cp .scratch/$WIN.py instance_norm.py; md5sum instance_norm.py
  left=$((585 - (SECONDS - START)))
  timeout $left python3 -m pytest -q tests -x -p no:cacheprovider > $OUT/pytest_full.txt 2>&1
  echo "pytest rc=$?" >> $OUT/pytest_full.txt; tail -4 $OUT/pytest_full.txt
fi
