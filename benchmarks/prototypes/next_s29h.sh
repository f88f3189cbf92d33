#!/usr/bin/env bash
# Twenty-fifth session: the GPU suite on the file with ska alone (rc reverted: the main float32 backward
# 6238 -> 6330 us, call 4), then tune.py's backward candidates at (8,512,32,32) for what time is left.
#   run(command="bash benchmarks/prototypes/next_s29h.sh", timeout_s=600)
set -uo pipefail
START=$SECONDS
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 INSTANCE_NORM_REQUIRE_GPU=1 TORCH_EXTENSIONS_DIR=/tmp/ext MAX_JOBS=8
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv; md5sum instance_norm.py; } > $OUT/device.txt 2>&1
timeout 300 python3 -c "import instance_norm; instance_norm.load_extension(); print('built')" > $OUT/build.txt 2>&1
echo "built at $((SECONDS - START)) s"
timeout 330 python3 -m pytest -q tests -p no:cacheprovider > $OUT/suite.txt 2>&1
tail -2 $OUT/suite.txt; echo "suite done at $((SECONDS - START)) s"
