#!/usr/bin/env bash
# Twenty-sixth session, call 4: the main shape's backward against its peers on the landed file
# (bench.py --backward, main shape, float32 and bfloat16), then the three mutants not run on these
# kernels yet.
#   run(command="bash benchmarks/prototypes/next_s30e.sh", timeout_s=600)
set -uo pipefail
START=$SECONDS
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 INSTANCE_NORM_REQUIRE_GPU=1 MAX_JOBS=8
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv; md5sum instance_norm.py; } > $OUT/device.txt 2>&1
TORCH_EXTENSIONS_DIR=/tmp/ext timeout 330 python3 benchmarks/bench.py --quick --backward --shapes main \
  --dtypes float32,bfloat16 --out $OUT/bench > $OUT/bench.txt 2>&1
echo "bench done at $((SECONDS - START)) s"; grep -v "^ *$" $OUT/bench.txt | tail -40 | cut -c1-200
TORCH_EXTENSIONS_DIR=/tmp/extm timeout $((590 - (SECONDS - START))) python3 benchmarks/mutate.py \
  --only variance_normalizer,boundary_element,residual_dropped > $OUT/mutate.txt 2>&1
echo "rc=$? at $((SECONDS - START)) s" >> $OUT/mutate.txt; tail -8 $OUT/mutate.txt
