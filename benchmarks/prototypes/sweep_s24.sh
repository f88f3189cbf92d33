#!/usr/bin/env bash
# Twentieth session, call 3: after the onchip instruction diet (7f9863c): the candidate plans at small
# shapes (graph replay, forward and backward: does the heuristic still pick the best?), then bench.py's
# forward and backward tables at the sweep's shapes below the main one, with the peers.
set -uo pipefail
END=$((SECONDS + 585))
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 INSTANCE_NORM_REQUIRE_GPU=1 TORCH_EXTENSIONS_DIR=/tmp/ext
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv; md5sum instance_norm.py; } > $OUT/device.txt 2>&1
timeout 240 python3 -c "import time; t=time.time(); import instance_norm; instance_norm.load_extension(); print(f'built {time.time()-t:.1f} s')" > $OUT/build.txt 2>&1 || exit 1
S=8x512x32x32,4x128x128x128,1x16x64x64,3x5x127x129,32x3x224x224
timeout 60 python3 benchmarks/tune.py --graph --shapes $S --dtypes float32,bfloat16 --top 4 > $OUT/tune_fwd.txt 2>&1
timeout 60 python3 benchmarks/tune.py --graph --backward --shapes $S --dtypes float32,bfloat16 --top 4 > $OUT/tune_bwd.txt 2>&1
timeout $((END - SECONDS - 5)) python3 benchmarks/bench.py --quick --backward --dtypes float32,bfloat16 \
  --shapes 64x256x7x7,3x5x127x129,32x3x224x224,8x512x32x32,4x128x128x128,1x16x64x64,16x64x256x256 --out $OUT/sweep > $OUT/bench.txt 2>&1
echo "bench rc=$?" >> $OUT/bench.txt
tar czf $OUT/sweep.tgz -C $OUT sweep
grep -h "default\|^float\|^bfloat" $OUT/tune_fwd.txt $OUT/tune_bwd.txt | cut -c1-150 | head -60; tail -5 $OUT/bench.txt
