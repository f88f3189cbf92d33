#!/usr/bin/env bash
# s27 call 4: base / lfc (loads first only in the backward without affine parameters) A/B, then the full
# GPU suite on lfc if it wins (all 25 rows, geomean <= 0.99, none above 1.02).
set -uo pipefail
START=$SECONDS
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 INSTANCE_NORM_REQUIRE_GPU=1 TORCH_EXTENSIONS_DIR=/tmp/ext MAX_JOBS=8
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv; md5sum instance_norm.py .scratch/lfc/instance_norm.py; } > $OUT/device.txt 2>&1
python3 -c "import importlib.util; s=importlib.util.spec_from_file_location('lfc','.scratch/lfc/instance_norm.py'); m=importlib.util.module_from_spec(s); s.loader.exec_module(m); m.load_extension(); print('built')" > $OUT/build_lfc.txt 2>&1 &
python3 -c "import instance_norm; instance_norm.load_extension(); print('built')" > $OUT/build.txt 2>&1
wait; echo "built at $((SECONDS - START)) s"
for f in $OUT/build*.txt; do grep -q built $f || { echo "build failed $f"; tail -5 $f; exit 1; }; done
AB="timeout 100 python3 benchmarks/prototypes/pdl_ab_s21.py base=instance_norm.py lfc=.scratch/lfc/instance_norm.py --rounds 3"
{
$AB --cases bwd,bwdaff --dtypes bfloat16,float16,float32 --shapes 8x512x32x32
$AB --cases bwd,bwdaff --dtypes bfloat16,float32 --shapes 32x256x32x32,1x16x64x64,4x128x128x128,64x256x7x7
$AB --cases train --dtypes bfloat16 --shapes 8x512x32x32
$AB --cases acttrain --dtypes float32 --shapes 8x512x32x32,1x16x64x64
} > $OUT/ab.txt 2>&1
echo "ab done at $((SECONDS - START)) s"
python3 - > $OUT/verdict.txt <<'PY'
import math, re, os
r = [(float(m.group(1)), l.split('|')[0].strip()) for l in open(os.environ['OUT'] + '/ab.txt') for m in [re.search(r'lfc/base [0-9.a-z]+/([0-9.a-z]+)', l)] if m]
v = [x for x, _ in r]
g = math.exp(sum(map(math.log, v)) / len(v)) if v else 9
print(f'rows {len(r)} geomean {g:.3f} worst ' + '; '.join(f'{x:.3f} {t}' for x, t in sorted(r, reverse=True)[:3]))
print('WINNER lfc' if len(r) == 25 and all(x == x for x in v) and g <= 0.99 and max(v) <= 1.02 else 'WINNER base')
PY
cat $OUT/verdict.txt
if grep -q "WINNER lfc" $OUT/verdict.txt; then
  cp .scratch/lfc/instance_norm.py instance_norm.py; md5sum instance_norm.py > $OUT/suite_md5.txt
  left=$((585 - (SECONDS - START)))
  timeout $left python3 -m pytest -q tests -p no:cacheprovider -x > $OUT/pytest_full.txt 2>&1
  echo "pytest rc=$?" >> $OUT/pytest_full.txt; tail -4 $OUT/pytest_full.txt
fi
