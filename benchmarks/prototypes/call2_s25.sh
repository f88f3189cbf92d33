#!/usr/bin/env bash
# Twenty-first session, call 2: the register-held whole-group forward (kOnchipRegisterValues) landed in
# instance_norm.py. Full GPU suite, fused-epilogue A/B against the previous commit (Activated spills), then
# compute-sanitizer memcheck over sanitize.py in what time is left.
set -uo pipefail
END=$((SECONDS + 585))
mkdir -p .scratch
git show HEAD:instance_norm.py > .scratch/old.py
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 INSTANCE_NORM_REQUIRE_GPU=1 TORCH_EXTENSIONS_DIR=/tmp/ext
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv; md5sum instance_norm.py .scratch/old.py; git log --oneline -1; } > $OUT/device.txt 2>&1
python3 -c "import importlib.util; s=importlib.util.spec_from_file_location('m_old','.scratch/old.py'); m=importlib.util.module_from_spec(s); s.loader.exec_module(m); m.load_extension()" > $OUT/build_old.txt 2>&1 &
timeout 240 python3 -c "import time; t=time.time(); import instance_norm; instance_norm.load_extension(); print(f'built {time.time()-t:.1f} s')" > $OUT/build.txt 2>&1 || { cat $OUT/build.txt | tail -30; exit 1; }
timeout 280 python3 -m pytest -q -x tests/ -p no:cacheprovider > $OUT/pytest.txt 2>&1; echo "rc=$?" >> $OUT/pytest.txt
tail -5 $OUT/pytest.txt
wait
S=8x512x32x32,32x256x32x32,16x128x32x32,4x128x128x128,1x16x64x64
timeout $((END - SECONDS - 60)) python3 benchmarks/prototypes/pdl_ab_s21.py old=.scratch/old.py new=instance_norm.py --rounds 3 \
  --cases act,actres,train --dtypes float32,bfloat16 --shapes $S > $OUT/ab_act.txt 2>&1; echo "rc=$?" >> $OUT/ab_act.txt
cut -c1-150 $OUT/ab_act.txt
left=$((END - SECONDS - 5))
[ $left -gt 30 ] && { timeout $left compute-sanitizer --tool memcheck python3 benchmarks/sanitize.py > $OUT/sanitize_memcheck.txt 2>&1; echo "rc=$? in ${left}s" >> $OUT/sanitize_memcheck.txt; tail -4 $OUT/sanitize_memcheck.txt; }
