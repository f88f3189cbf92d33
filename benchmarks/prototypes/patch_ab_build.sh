#!/usr/bin/env bash
# Shared by next_s29c.sh and next_s29d.sh (twenty-fourth session): make /tmp/vab/NAME/instance_norm.py,
# the repository's file with PATCH applied, and build it and the repository's file in parallel (logs
# $OUT/build_NAME.txt and $OUT/build.txt, $OUT/device.txt with both md5s). Exits non-zero when the patch
# does not apply or a build fails. Run from the repository root:
#   bash benchmarks/prototypes/patch_ab_build.sh NAME PATCH
set -uo pipefail
NAME=$1 PATCH=$(realpath "$2")
rm -rf /tmp/vab/$NAME && mkdir -p /tmp/vab/$NAME && cp instance_norm.py /tmp/vab/$NAME/ || exit 1
(cd /tmp/vab/$NAME && git init -q && git apply "$PATCH") || { echo "$PATCH does not apply"; exit 1; }
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv; md5sum instance_norm.py /tmp/vab/$NAME/instance_norm.py; } > $OUT/device.txt 2>&1
timeout 300 python3 -c "import importlib.util; s=importlib.util.spec_from_file_location('$NAME','/tmp/vab/$NAME/instance_norm.py'); m=importlib.util.module_from_spec(s); s.loader.exec_module(m); m.load_extension(); print('built')" > $OUT/build_$NAME.txt 2>&1 &
timeout 300 python3 -c "import instance_norm; instance_norm.load_extension(); print('built')" > $OUT/build.txt 2>&1
wait
for f in $OUT/build.txt $OUT/build_$NAME.txt; do grep -qx built $f || { echo "build failed $f"; tail -5 $f; exit 1; }; done
