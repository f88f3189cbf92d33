#!/usr/bin/env bash
# Prepared in the twentieth session for the next one's first device call (benchmarks/NOTES.md, twentieth
# session, call 5 and next steps): why float32's training step did not follow the backward alone when the
# backward's stream plans went plain-first. run(command="bash benchmarks/prototypes/next_s25.sh")
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 INSTANCE_NORM_REQUIRE_GPU=1 TORCH_EXTENSIONS_DIR=/tmp/ext
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv; md5sum instance_norm.py; } > $OUT/device.txt 2>&1
timeout 240 python3 -c "import time; t=time.time(); import instance_norm; instance_norm.load_extension(); print(f'built {time.time()-t:.1f} s')" > $OUT/build.txt 2>&1 || exit 1
timeout 240 python3 benchmarks/prototypes/bwd_affine_probe_s25.py --dtypes float32,bfloat16 > $OUT/bwd_affine_probe.txt 2>&1
echo "rc=$?" >> $OUT/bwd_affine_probe.txt
cat $OUT/bwd_affine_probe.txt | cut -c1-160
