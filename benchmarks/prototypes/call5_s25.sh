#!/usr/bin/env bash
# Twenty-first session, call 5 (carry .scratch: fwdregs.py = 266cb93's file, the forward-only register path):
# the register-held backward against it in the fused training step (gelu: Activated backward, the most
# registers) and the plain one, fp32/bf16/fp16; then compute-sanitizer racecheck in what time is left.
set -uo pipefail
END=$((SECONDS + 585))
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 INSTANCE_NORM_REQUIRE_GPU=1 TORCH_EXTENSIONS_DIR=/tmp/ext
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv; md5sum instance_norm.py .scratch/fwdregs.py; } > $OUT/device.txt 2>&1
python3 -c "import importlib.util; s=importlib.util.spec_from_file_location('m_old','.scratch/fwdregs.py'); m=importlib.util.module_from_spec(s); s.loader.exec_module(m); m.load_extension()" > $OUT/build_old.txt 2>&1 &
python3 -c "import instance_norm; instance_norm.load_extension()" > $OUT/build.txt 2>&1 &
wait
S=8x512x32x32,32x256x32x32,16x128x32x32,1x16x64x64
timeout 220 python3 benchmarks/prototypes/pdl_ab_s21.py fwdregs=.scratch/fwdregs.py new=instance_norm.py --rounds 3 \
  --cases acttrain,train --dtypes float32,bfloat16,float16 --shapes $S > $OUT/ab_acttrain.txt 2>&1; echo "rc=$?" >> $OUT/ab_acttrain.txt
cut -c1-150 $OUT/ab_acttrain.txt
left=$((END - SECONDS - 5))
[ $left -gt 30 ] && { timeout $left compute-sanitizer --tool racecheck python3 benchmarks/sanitize.py > $OUT/sanitize_racecheck.txt 2>&1; echo "rc=$? in ${left}s" >> $OUT/sanitize_racecheck.txt; tail -4 $OUT/sanitize_racecheck.txt; }
