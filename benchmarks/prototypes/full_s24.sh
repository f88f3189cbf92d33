#!/usr/bin/env bash
# Twentieth session, call 2: the onchip instruction diet (onchip_fast_s24.patch, applied) under the whole
# GPU suite, then compute-sanitizer memcheck and racecheck over sanitize.py (every regime's first and
# last plan, so the whole-group path at the 64x64 shapes too).
set -uo pipefail
END=$((SECONDS + 585))
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 INSTANCE_NORM_REQUIRE_GPU=1 TORCH_EXTENSIONS_DIR=/tmp/ext
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv; md5sum instance_norm.py; } > $OUT/device.txt 2>&1
timeout 240 python3 -c "import time; t=time.time(); import instance_norm; instance_norm.load_extension(); print(f'built {time.time()-t:.1f} s')" > $OUT/build.txt 2>&1 || exit 1
timeout 300 python3 -m pytest -q tests/ -p no:cacheprovider > $OUT/pytest.txt 2>&1; echo "rc=$?" >> $OUT/pytest.txt
tail -3 $OUT/pytest.txt
for tool in memcheck racecheck; do
  left=$(( (END - SECONDS) ))
  [ $tool = memcheck ] && left=$(( left / 2 ))
  timeout $left compute-sanitizer --tool $tool python3 benchmarks/sanitize.py > $OUT/sanitize_$tool.txt 2>&1; echo "rc=$? in ${left}s budget" >> $OUT/sanitize_$tool.txt
  tail -4 $OUT/sanitize_$tool.txt
done
