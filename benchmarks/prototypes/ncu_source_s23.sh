#!/usr/bin/env bash
# Nineteenth session, call 8: ncu --set full with SASS source counts of our onchip forward kernel at
# fp32 (8,512,32,32) (onchip(K=8,G=32), a warp an instance), where Inductor's kernel is 1.2-1.6x faster.
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 INSTANCE_NORM_REQUIRE_GPU=1 TORCH_EXTENSIONS_DIR=/tmp/ext
timeout 240 python3 -c "import instance_norm; instance_norm.load_extension()" > $OUT/build.txt 2>&1 || exit 1
timeout 120 ncu --clock-control none --nvtx --nvtx-include "measure/" --set full --import-source yes -o $OUT/onchip_8x512 \
  python3 benchmarks/prototypes/ncu_small_s23.py ours 8 512 32 32 float32 > $OUT/ncu_log.txt 2>&1
ncu -i $OUT/onchip_8x512.ncu-rep --page source --csv --print-source sass > $OUT/onchip_8x512_sass.csv 2>&1
ncu -i $OUT/onchip_8x512.ncu-rep --page details > $OUT/onchip_8x512_details.txt 2>&1
gzip -k $OUT/onchip_8x512_sass.csv; ls -la $OUT; head -3 $OUT/onchip_8x512_sass.csv | cut -c1-600
