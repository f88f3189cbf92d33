#!/usr/bin/env bash
# Twenty-sixth session, call 3: the GPU suite on the committed file (eif landed, its comment written)
# and, alongside it, three mutants on the stream kernel's synchronization (early_refill_race is new:
# the float32 stream backward's early refill without its barrier). Correctness only, so sharing the
# GPU is harmless.
#   run(command="bash benchmarks/prototypes/next_s30d.sh", timeout_s=600)
set -uo pipefail
START=$SECONDS
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 INSTANCE_NORM_REQUIRE_GPU=1 MAX_JOBS=8
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv; md5sum instance_norm.py; } > $OUT/device.txt 2>&1
(TORCH_EXTENSIONS_DIR=/tmp/extm timeout 570 python3 benchmarks/mutate.py --only early_refill_race,missing_barrier,cluster_exchange \
  > $OUT/mutate.txt 2>&1; echo "rc=$? at $((SECONDS - START)) s" >> $OUT/mutate.txt) &
TORCH_EXTENSIONS_DIR=/tmp/ext timeout 560 python3 -m pytest -q tests -p no:cacheprovider -x > $OUT/suite.txt 2>&1
echo "suite done at $((SECONDS - START)) s"; tail -3 $OUT/suite.txt
wait
tail -8 $OUT/mutate.txt
