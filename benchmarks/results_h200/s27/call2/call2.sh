#!/usr/bin/env bash
# s27 call 2: four builds: base (cea54740), lf (loads first), b32 (32-bit channel modulo), lf32 (both)
set -uo pipefail
START=$SECONDS
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 INSTANCE_NORM_REQUIRE_GPU=1 TORCH_EXTENSIONS_DIR=/tmp/ext MAX_JOBS=4
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv; md5sum instance_norm.py .scratch/*/instance_norm.py; } > $OUT/device.txt 2>&1
for v in lf b32 lf32; do
python3 -c "import importlib.util; s=importlib.util.spec_from_file_location('$v','.scratch/$v/instance_norm.py'); m=importlib.util.module_from_spec(s); s.loader.exec_module(m); m.load_extension(); print('built')" > $OUT/build_$v.txt 2>&1 &
done
python3 -c "import instance_norm; instance_norm.load_extension(); print('built')" > $OUT/build.txt 2>&1
wait; echo "built at $((SECONDS - START)) s"
for f in $OUT/build*.txt; do grep -q built $f || { echo "build failed $f"; tail -5 $f; exit 1; }; done
AB="timeout 200 python3 benchmarks/prototypes/pdl_ab_s21.py base=instance_norm.py lf=.scratch/lf/instance_norm.py b32=.scratch/b32/instance_norm.py lf32=.scratch/lf32/instance_norm.py --rounds 3"
{
$AB --cases bwd,bwdaff,train --dtypes bfloat16,float32,float16 --shapes 8x512x32x32
$AB --cases bwd,bwdaff,train --dtypes bfloat16,float32 --shapes 32x256x32x32,1x16x64x64,64x256x7x7,4x128x128x128
$AB --cases bwd,train --dtypes bfloat16,float32 --shapes 16x64x256x256
$AB --cases acttrain --dtypes bfloat16,float32 --shapes 8x512x32x32,1x16x64x64
$AB --cases fwd,act --dtypes float32,bfloat16 --shapes 32x3x224x224,8x512x32x32,1x16x64x64,4x128x128x128,64x256x7x7
} > $OUT/ab.txt 2>&1
echo "ab done at $((SECONDS - START)) s"
python3 - <<'PY'
import math, re, os, collections
rows = collections.defaultdict(list)
for l in open(os.environ['OUT'] + '/ab.txt'):
    for m in re.finditer(r'(\w+)/base ([0-9.a-z]+)/([0-9.a-z]+)', l):
        rows[m.group(1)].append((float(m.group(3)), l.split('|')[0].strip()))
for n, r in rows.items():
    v = [x for x, _ in r if x == x]
    g = math.exp(sum(map(math.log, v)) / len(v))
    worst = sorted(r, reverse=True)[:3]
    print(f'{n}: rows {len(r)} geomean(graph) {g:.3f} worst ' + '; '.join(f'{x:.3f} {t}' for x, t in worst))
PY
