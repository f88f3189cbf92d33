#!/usr/bin/env bash
# Prepared in the twenty-third session: the next session's second call.
#   run(command="bash benchmarks/prototypes/next_s28b.sh VARIANT", timeout_s=600)
# VARIANT lf, pk, lfpk, rc, lfr, lfpkna or lfb (variants_s27.sh): the full GPU suite on that file, in the device's copy (apply
# the patch locally and commit only after it passes). VARIANT base (no winner): the suite already passed on
# the committed file (twenty-third session, md5 cea54740), so this runs next_s27b.sh's rows that did not
# fit then instead: bench.py --quick --backward at the main shape in bf16 and fp16, (1,2,4096,4096) in
# float32 and bfloat16.
set -uo pipefail
START=$SECONDS
V=${1:-base}
case $V in base|lf|pk|lfpk|rc|lfr|lfpkna|lfb) ;; *) echo "unknown variant '$V'"; exit 1 ;; esac
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 INSTANCE_NORM_REQUIRE_GPU=1 TORCH_EXTENSIONS_DIR=/tmp/ext MAX_JOBS=16
if [ "$V" = base ]; then exec bash benchmarks/prototypes/next_s27b.sh; fi
bash benchmarks/prototypes/variants_s27.sh > /dev/null || exit 1
cp /tmp/v/$V/instance_norm.py instance_norm.py || exit 1
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv; md5sum instance_norm.py; } > $OUT/device.txt 2>&1
timeout 240 python3 -c "import instance_norm; instance_norm.load_extension()" > $OUT/build.txt 2>&1 || { tail -5 $OUT/build.txt; exit 1; }
echo "built at $((SECONDS - START)) s"
timeout $((560 - (SECONDS - START))) python3 -m pytest -q tests -p no:cacheprovider > $OUT/pytest_full.txt 2>&1
echo "pytest rc=$?" >> $OUT/pytest_full.txt; tail -3 $OUT/pytest_full.txt
echo "suite done at $((SECONDS - START)) s"
