#!/usr/bin/env bash
# Twentieth session, call 4: the backward's stream plans for instances in neither the few nor the many
# crowd (call 3's tune.py: (32,3,224,224) took 0.0196 ms on stream(CS=4,S=2) against 0.0232 on the
# default run-ahead stream(CS=8,S=4,K=4) in fp32, bf16 0.0119 on stream(CS=2,S=2) against 0.0139),
# and a many-instance control; then the warp plans' K in fp32 at 1024-element instances.
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 INSTANCE_NORM_REQUIRE_GPU=1 TORCH_EXTENSIONS_DIR=/tmp/ext
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv; md5sum instance_norm.py; } > $OUT/device.txt 2>&1
timeout 240 python3 -c "import time; t=time.time(); import instance_norm; instance_norm.load_extension(); print(f'built {time.time()-t:.1f} s')" > $OUT/build.txt 2>&1 || exit 1
S=32x3x224x224,1x64x256x256,2x32x160x160,1x100x224x224,2x100x256x256,4x64x160x160,8x24x224x224,16x64x256x256
timeout 200 python3 benchmarks/tune.py --graph --backward --match stream --shapes $S --dtypes float32,bfloat16 --top 6 > $OUT/tune_bwd_stream.txt 2>&1
S2=8x512x32x32,32x256x32x32,16x128x32x32,4x512x32x64
timeout 90 python3 benchmarks/tune.py --graph --match onchip --shapes $S2 --dtypes float32 --top 4 > $OUT/tune_fwd_warp.txt 2>&1
timeout 90 python3 benchmarks/tune.py --graph --backward --match onchip --shapes $S2 --dtypes float32 --top 4 > $OUT/tune_bwd_warp.txt 2>&1
for f in tune_bwd_stream tune_fwd_warp tune_bwd_warp; do cut -c1-90 $OUT/$f.txt | grep -v "^$\|^#"; done
