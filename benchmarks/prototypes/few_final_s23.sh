#!/usr/bin/env bash
# Nineteenth session, call 3: the final heuristic (crowd_of, widest_stream): its picks for 1..133
# instances, tune.py's default against the candidates (forward and backward, graph replay), then
# the whole GPU suite.
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 INSTANCE_NORM_REQUIRE_GPU=1 TORCH_EXTENSIONS_DIR=/tmp/ext
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv; md5sum instance_norm.py; } > $OUT/device.txt 2>&1
timeout 240 python3 -c "import time; t=time.time(); import instance_norm; instance_norm.load_extension(); print(f'built {time.time()-t:.1f} s')" > $OUT/build.txt 2>&1 || exit 1
timeout 30 python3 benchmarks/prototypes/few_plans_s23.py > $OUT/few_plans.txt 2>&1
S=1x8x256x256,1x12x256x256,1x16x256x256,1x6x256x256,1x3x224x224,1x2x512x512,1x4x512x512
timeout 60 python3 benchmarks/tune.py --graph --shapes $S --dtypes float32,bfloat16 --top 5 > $OUT/tune_fwd.txt 2>&1
timeout 45 python3 benchmarks/tune.py --graph --backward --shapes $S --dtypes float32,bfloat16 --top 5 > $OUT/tune_bwd.txt 2>&1
timeout 330 python3 -m pytest -q -x tests/ -p no:cacheprovider > $OUT/pytest.txt 2>&1; echo "rc=$?" >> $OUT/pytest.txt
cat $OUT/few_plans.txt | cut -c1-400; grep -h "default" $OUT/tune_fwd.txt $OUT/tune_bwd.txt; tail -3 $OUT/pytest.txt
