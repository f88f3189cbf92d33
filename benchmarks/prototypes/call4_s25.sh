#!/usr/bin/env bash
# Twenty-first session, call 4: the register-held whole-group backward (kOnchipRegisterValuesBackward) landed in
# instance_norm.py. Full GPU suite, then
# compute-sanitizer memcheck over sanitize.py in what time is left.
set -uo pipefail
END=$((SECONDS + 585))
mkdir -p .scratch
git show HEAD:instance_norm.py > .scratch/old.py
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 INSTANCE_NORM_REQUIRE_GPU=1 TORCH_EXTENSIONS_DIR=/tmp/ext
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv; md5sum instance_norm.py .scratch/old.py; git log --oneline -1; } > $OUT/device.txt 2>&1
timeout 240 python3 -c "import time; t=time.time(); import instance_norm; instance_norm.load_extension(); print(f'built {time.time()-t:.1f} s')" > $OUT/build.txt 2>&1 || { cat $OUT/build.txt | tail -30; exit 1; }
timeout 280 python3 -m pytest -q -x tests/ -p no:cacheprovider > $OUT/pytest.txt 2>&1; echo "rc=$?" >> $OUT/pytest.txt
tail -5 $OUT/pytest.txt
left=$((END - SECONDS - 5))
[ $left -gt 30 ] && { timeout $left compute-sanitizer --tool memcheck python3 benchmarks/sanitize.py > $OUT/sanitize_memcheck.txt 2>&1; echo "rc=$? in ${left}s" >> $OUT/sanitize_memcheck.txt; tail -4 $OUT/sanitize_memcheck.txt; }
