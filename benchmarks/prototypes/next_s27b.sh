#!/usr/bin/env bash
# Prepared in the twenty-second session: the next session's second call, after next_s27.sh.
#   run(command="bash benchmarks/prototypes/next_s27b.sh", timeout_s=600)
# Issue 12's large rows, not re-benched since the seventh (bf16 main) and eighteenth ((1,2,4096,4096))
# sessions: bench.py --quick --backward at the main shape in bf16 and fp16 and (1,2,4096,4096) in
# float32 / bfloat16 (the twenty-second session ran the main shape in float32). The instance_norm.py it runs
# is whatever the repository holds then (after next_s27.sh's verdict).
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 INSTANCE_NORM_REQUIRE_GPU=1 TORCH_EXTENSIONS_DIR=/tmp/ext
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv; md5sum instance_norm.py; } > $OUT/device.txt 2>&1
timeout 240 python3 -c "import instance_norm; instance_norm.load_extension()" > $OUT/build.txt 2>&1 || exit 1
timeout 200 python3 benchmarks/bench.py --quick --backward --dtypes bfloat16,float16 --shapes 112x64x512x512 \
  --out $OUT/main16 > $OUT/bench_main16.txt 2>&1; echo "rc=$?" >> $OUT/bench_main16.txt
timeout 150 python3 benchmarks/bench.py --quick --backward --dtypes float32,bfloat16 --shapes 1x2x4096x4096 \
  --out $OUT/big > $OUT/bench_big.txt 2>&1; echo "rc=$?" >> $OUT/bench_big.txt
grep -h "^\[\|forward \|backward \|rc=" $OUT/bench_main16.txt $OUT/bench_big.txt
tar czf $OUT/tables.tgz -C $OUT main16 big 2>/dev/null; rm -rf $OUT/main16 $OUT/big
