#!/usr/bin/env bash
# Prepared in the twenty-second session for the next one's first device call:
#   run(command="bash benchmarks/prototypes/next_s27.sh", timeout_s=600)
# The backward's data loads before its per-instance prologue (prototypes/loads_first_s26.patch): ncu
# (results_h200/s26/call6) has our bf16 (8,512,32,32) backward executing 1.90 M warp instructions against
# Inductor's 1.49 M, and its SASS issues the x/dy loads only after ~127 instructions (the 64-bit channel
# modulo, the weight's dtype switch); with the patch the statistics and data loads come after ~57, the
# modulo only for affine parameters. Only backward kernels change (108 of 261, SASS compared locally).
# A/B in graph replay (the figure; do_bench of autograd steps is host-bound), then, if it wins (geomean of
# the graph ratios <= 0.99, no row above 1.02), the full GPU suite on it in the device's copy.
set -uo pipefail
START=$SECONDS
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 INSTANCE_NORM_REQUIRE_GPU=1 TORCH_EXTENSIONS_DIR=/tmp/ext MAX_JOBS=8
rm -rf /tmp/lf && mkdir -p /tmp/lf && cp instance_norm.py /tmp/lf/ && (cd /tmp/lf && git init -q && git apply "$OLDPWD/benchmarks/prototypes/loads_first_s26.patch") || { echo "patch failed"; exit 1; }
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv; md5sum instance_norm.py /tmp/lf/instance_norm.py; } > $OUT/device.txt 2>&1
python3 -c "import importlib.util; s=importlib.util.spec_from_file_location('lf','/tmp/lf/instance_norm.py'); m=importlib.util.module_from_spec(s); s.loader.exec_module(m); m.load_extension(); print('built')" > $OUT/build_lf.txt 2>&1 &
python3 -c "import instance_norm; instance_norm.load_extension(); print('built')" > $OUT/build.txt 2>&1
wait; echo "built at $((SECONDS - START)) s"
grep -q built $OUT/build.txt && grep -q built $OUT/build_lf.txt || { echo "a build failed"; tail -5 $OUT/build*.txt; exit 1; }
AB="timeout 150 python3 benchmarks/prototypes/pdl_ab_s21.py base=instance_norm.py lf=/tmp/lf/instance_norm.py --rounds 3"
{
$AB --cases bwd,bwdaff,train --dtypes bfloat16,float32,float16 --shapes 8x512x32x32
$AB --cases bwd,train --dtypes bfloat16,float32 --shapes 32x256x32x32,1x16x64x64,64x256x7x7,4x128x128x128,16x64x256x256
$AB --cases acttrain --dtypes bfloat16,float32 --shapes 8x512x32x32,1x16x64x64  # fp32 gelu K=4: 92 -> 64 registers
} > $OUT/ab.txt 2>&1
grep -v "^loaded" $OUT/ab.txt | cut -c1-160; echo "ab done at $((SECONDS - START)) s"
WIN=$(python3 -c "
import math, re, os
r = [float(m.group(1)) for l in open(os.environ['OUT'] + '/ab.txt') for m in [re.search(r'lf/base [0-9.a-z]+/([0-9.]+)', l)] if m]
g = math.exp(sum(map(math.log, r)) / len(r)) if r else 9
import sys; print(f'rows {len(r)} geomean {g:.3f} max {max(r, default=9):.3f}', file=sys.stderr)
print('yes' if len(r) == 33 and g <= 0.99 and max(r) <= 1.02 else '')  # every row, none failed (nan)
")
echo "winner: '${WIN}'"
if [ -n "$WIN" ]; then
  cp /tmp/lf/instance_norm.py instance_norm.py; md5sum instance_norm.py
  left=$((590 - (SECONDS - START)))
  if [ $left -lt 120 ]; then echo "no time left for the suite ($left s)"; else
    timeout $left python3 -m pytest -q tests -p no:cacheprovider > $OUT/pytest_full.txt 2>&1
    echo "pytest rc=$?" >> $OUT/pytest_full.txt; tail -4 $OUT/pytest_full.txt
  fi
fi
