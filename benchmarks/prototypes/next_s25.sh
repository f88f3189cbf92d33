#!/usr/bin/env bash
# Prepared in the twentieth session for the next one's first device call (benchmarks/NOTES.md, twentieth
# session, next steps). run(command="bash benchmarks/prototypes/next_s25.sh", timeout_s=600)
# 1. The register-held whole-group forward (prototypes/onchip_regs_s25.patch, compiled only): variants
#    built next to the committed file in .scratch (made here, on the device): regs (fp32 up to 32 values a
#    thread, 16-bit up to 16), regs32 (16-bit up to 32 as well), regs_cs (streaming loads).
# 2. A/B forward (do_bench / graph replay) at the shapes whose default plan takes the path, then ncu counts.
# 3. The float32 training-step question (bwd_affine_probe_s25.py), on the committed build.
# The test suite on the kept variant goes in the second call (copy it over instance_norm.py there).
set -uo pipefail
END=$((SECONDS + 580))
mkdir -p .scratch
cp instance_norm.py .scratch/old.py
python3 benchmarks/prototypes/make_regs_s25.py > $OUT/make_regs.txt 2>&1 || { cat $OUT/make_regs.txt; exit 1; }
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 INSTANCE_NORM_REQUIRE_GPU=1 TORCH_EXTENSIONS_DIR=/tmp/ext
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv; md5sum instance_norm.py .scratch/*.py; } > $OUT/device.txt 2>&1
for f in .scratch/old.py .scratch/regs.py .scratch/regs32.py .scratch/regs_cs.py; do
  python3 -c "import importlib.util; s=importlib.util.spec_from_file_location('m_$(basename $f .py)','$f'); m=importlib.util.module_from_spec(s); s.loader.exec_module(m); m.load_extension()" > $OUT/build_$(basename $f).txt 2>&1 &
done
wait
S=8x512x32x32,32x256x32x32,16x128x32x32,4x128x128x128,1x16x64x64,2x16x48x48
timeout 240 python3 benchmarks/prototypes/pdl_ab_s21.py old=.scratch/old.py regs=.scratch/regs.py regs32=.scratch/regs32.py \
  regs_cs=.scratch/regs_cs.py --rounds 3 --cases fwd --dtypes float32,bfloat16 --shapes $S > $OUT/ab.txt 2>&1; echo "rc=$?" >> $OUT/ab.txt
cut -c1-200 $OUT/ab.txt
bash benchmarks/prototypes/ncu_onchip_counts.sh 60 .scratch/old.py .scratch/regs.py
timeout $((END - SECONDS - 5)) python3 benchmarks/prototypes/bwd_affine_probe_s25.py --dtypes float32,bfloat16 > $OUT/bwd_affine_probe.txt 2>&1
echo "rc=$?" >> $OUT/bwd_affine_probe.txt
cut -c1-160 $OUT/bwd_affine_probe.txt
