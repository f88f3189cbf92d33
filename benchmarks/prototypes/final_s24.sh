#!/usr/bin/env bash
# Twentieth session, call 6: the final code (the backward's run-ahead order for 16-bit types only):
# the plans it picks at call 5's shapes, then the whole GPU suite.
set -uo pipefail
END=$((SECONDS + 430))
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 INSTANCE_NORM_REQUIRE_GPU=1 TORCH_EXTENSIONS_DIR=/tmp/ext
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv; md5sum instance_norm.py; } > $OUT/device.txt 2>&1
timeout 200 python3 -c "import time; t=time.time(); import instance_norm; instance_norm.load_extension(); print(f'built {time.time()-t:.1f} s')" > $OUT/build.txt 2>&1 || exit 1
timeout 30 python3 -c "
import torch, instance_norm as m
for dt in (torch.float32, torch.bfloat16, torch.float16):
    for s in ((32,3,224,224),(1,64,256,256),(2,32,160,160),(1,100,224,224),(4,64,160,160),(8,24,224,224),(2,100,256,256)):
        print(dt, s, m.chosen_plan(torch.empty(s, device='cuda', dtype=dt), True))
" > $OUT/plans.txt 2>&1
timeout $((END - SECONDS)) python3 -m pytest -q tests/ -p no:cacheprovider > $OUT/pytest.txt 2>&1; echo "rc=$?" >> $OUT/pytest.txt
cat $OUT/plans.txt; tail -3 $OUT/pytest.txt
