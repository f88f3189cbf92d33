#!/usr/bin/env bash
# Prepared in the twenty-fourth session for the next one's first device call (no carry):
#   run(command="bash benchmarks/prototypes/next_s29.sh", timeout_s=600)
# The backward changed (lfb, commit b98c7fe). 1. Is each small shape's chosen backward plan still the
# fastest? The 16-bit register path now takes 64 registers at K=4 (was 99), which may move the best
# (K, G) (tune.py --graph: every candidate plan, graph replay). 2. The peer tables of the twenty-second
# session (s26/call1/sweep) again on the new file: bench.py --quick --backward at seven shapes below the
# main one, float32 and bfloat16 (issue 12's small rows against torch.compile).
set -uo pipefail
START=$SECONDS
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 INSTANCE_NORM_REQUIRE_GPU=1 TORCH_EXTENSIONS_DIR=/tmp/ext
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv; md5sum instance_norm.py; } > $OUT/device.txt 2>&1
timeout 240 python3 -c "import instance_norm; instance_norm.load_extension()" > $OUT/build.txt 2>&1 || { tail -5 $OUT/build.txt; exit 1; }
echo "built at $((SECONDS - START)) s"
timeout 120 python3 benchmarks/tune.py --graph --backward --shapes 8x512x32x32,32x256x32x32,1x16x64x64,16x256x16x32 \
  --dtypes bfloat16,float16,float32 --top 5 > $OUT/tune_bwd.txt 2>&1
grep -h "default\|^float\|^bfloat" $OUT/tune_bwd.txt | cut -c1-150 | head -40
echo "tune done at $((SECONDS - START)) s"
timeout $((580 - (SECONDS - START))) python3 benchmarks/bench.py --quick --backward --dtypes float32,bfloat16 \
  --shapes 64x256x7x7,3x5x127x129,32x3x224x224,8x512x32x32,4x128x128x128,1x16x64x64,16x64x256x256 --out $OUT/sweep > $OUT/bench.txt 2>&1
echo "bench rc=$?" >> $OUT/bench.txt
tar czf $OUT/sweep.tgz -C $OUT sweep; rm -rf $OUT/sweep
tail -3 $OUT/bench.txt; echo "done at $((SECONDS - START)) s"
