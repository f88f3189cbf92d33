#!/usr/bin/env bash
# Forty-first session, call 3 (if time is left after next_s45a/b): issue 12's and 13's tables on the landed code,
# last run on the twenty-sixth session's code (s26/call1/sweep): bench.py --quick --backward --host below the main
# shape plus (1,2,4096,4096), float32 and bfloat16: forward and backward device time (do_bench, L2 flushed, and
# CUDA-graph replay) against eager, torch.compile and F.group_norm with the same-run copy / add floors, and the
# isolated-call host table (forward no grad, training step). The README's sweep tables quote these files.
#   run(command="bash benchmarks/prototypes/next_s45c.sh", timeout_s=600)
set -uo pipefail
START=$SECONDS
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 INSTANCE_NORM_REQUIRE_GPU=1 TORCH_EXTENSIONS_DIR=/tmp/ext MAX_JOBS=16
md5sum instance_norm.py > $OUT/md5.txt
timeout 300 python3 -c "import instance_norm; instance_norm.load_extension(); print('built')" > $OUT/build.txt 2>&1
echo "built at $((SECONDS - START)) s"
timeout $((590 - (SECONDS - START))) python3 benchmarks/bench.py --quick --backward --host --dtypes float32,bfloat16 \
  --shapes 64x256x7x7,3x5x127x129,32x3x224x224,8x512x32x32,4x128x128x128,1x16x64x64,16x64x256x256,1x2x4096x4096 \
  --out $OUT/sweep > $OUT/bench.txt 2>&1
echo "bench rc=$? at $((SECONDS - START)) s"
tail -30 $OUT/bench.txt
