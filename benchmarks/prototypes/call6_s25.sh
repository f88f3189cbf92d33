#!/usr/bin/env bash
# Twenty-first session, call 6: the 16-bit backward with an epilogue back on the shared-memory path
# (onchip_register_values). Build, then the epilogue tests and the onchip / whole-group plan tests.
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 INSTANCE_NORM_REQUIRE_GPU=1 TORCH_EXTENSIONS_DIR=/tmp/ext
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv; md5sum instance_norm.py; } > $OUT/device.txt 2>&1
timeout 200 python3 -c "import time; t=time.time(); import instance_norm; instance_norm.load_extension(); print(f'built {time.time()-t:.1f} s')" > $OUT/build.txt 2>&1 || { tail -30 $OUT/build.txt; exit 1; }
timeout 150 python3 -m pytest -q tests/test_epilogue.py tests/test_gpu.py -k "epilogue or fused or onchip or whole or backward or grad" -p no:cacheprovider > $OUT/pytest.txt 2>&1; echo "rc=$?" >> $OUT/pytest.txt
tail -3 $OUT/pytest.txt
