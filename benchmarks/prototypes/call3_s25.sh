#!/usr/bin/env bash
# Twenty-first session, call 3: (1) the register-held whole-group path for the backward too
# (make_bwregs_s25.py: bw32 / bw64 = x and dy values a thread at most 32 / 64), training-step A/B against
# the committed file; (2) bench.py's forward and backward tables below the main shape on the committed file.
set -uo pipefail
END=$((SECONDS + 585))
mkdir -p .scratch
python3 benchmarks/prototypes/make_bwregs_s25.py > $OUT/make.txt 2>&1 || { cat $OUT/make.txt; exit 1; }
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 INSTANCE_NORM_REQUIRE_GPU=1 TORCH_EXTENSIONS_DIR=/tmp/ext
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv; md5sum instance_norm.py .scratch/bw*.py; git log --oneline -1; } > $OUT/device.txt 2>&1
for f in instance_norm.py .scratch/bw32.py .scratch/bw64.py; do
  python3 -c "import importlib.util; s=importlib.util.spec_from_file_location('m_$(basename $f .py)','$f'); m=importlib.util.module_from_spec(s); s.loader.exec_module(m); m.load_extension()" > $OUT/build_$(basename $f).txt 2>&1 &
done
wait
S=8x512x32x32,32x256x32x32,16x128x32x32,1x16x64x64
timeout 200 python3 benchmarks/prototypes/pdl_ab_s21.py new=instance_norm.py bw32=.scratch/bw32.py bw64=.scratch/bw64.py \
  --rounds 3 --cases train --dtypes float32,bfloat16 --shapes $S > $OUT/ab_bwd.txt 2>&1; echo "rc=$?" >> $OUT/ab_bwd.txt
cut -c1-170 $OUT/ab_bwd.txt
timeout $((END - SECONDS - 5)) python3 benchmarks/bench.py --quick --backward --dtypes float32,bfloat16 \
  --shapes 64x256x7x7,3x5x127x129,32x3x224x224,8x512x32x32,4x128x128x128,1x16x64x64,16x64x256x256 --out $OUT/sweep > $OUT/bench.txt 2>&1
echo "bench rc=$?" >> $OUT/bench.txt
tar czf $OUT/sweep.tgz -C $OUT sweep
tail -3 $OUT/bench.txt
