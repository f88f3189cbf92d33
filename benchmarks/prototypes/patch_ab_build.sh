#!/usr/bin/env bash
# Shared by the next_s29*.sh / next_s30*.sh scripts (twenty-fourth session; several variants since the
# twenty-fifth): for each NAME PATCH pair make /tmp/vab/NAME/instance_norm.py, the repository's file with
# PATCH applied, and build them and the repository's file in parallel (logs $OUT/build_NAME.txt and
# $OUT/build.txt, $OUT/device.txt with every md5). Exits non-zero when a patch does not apply or a build
# fails (only the patch's instance_norm.py hunks apply there; tests travel with the tree). Run from the repository root:
#   bash benchmarks/prototypes/patch_ab_build.sh NAME PATCH [NAME2 PATCH2 ...]
set -uo pipefail
[ $# -ge 2 ] && [ $(($# % 2)) -eq 0 ] || { echo "usage: patch_ab_build.sh NAME PATCH [NAME2 PATCH2 ...]"; exit 1; }
NAMES=()
while [ $# -ge 2 ]; do
  NAME=$1 PATCH=$(realpath "$2"); shift 2
  [ -n "$NAME" ] || { echo "empty NAME"; exit 1; }
  rm -rf /tmp/vab/$NAME && mkdir -p /tmp/vab/$NAME && cp instance_norm.py /tmp/vab/$NAME/ || exit 1
  (cd /tmp/vab/$NAME && git init -q && git apply --include=instance_norm.py "$PATCH") || { echo "$PATCH does not apply"; exit 1; }
  NAMES+=("$NAME")
done
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv; md5sum instance_norm.py; for n in "${NAMES[@]}"; do md5sum /tmp/vab/$n/instance_norm.py; done; } > $OUT/device.txt 2>&1
for n in "${NAMES[@]}"; do
  timeout 400 python3 -c "import importlib.util; s=importlib.util.spec_from_file_location('$n','/tmp/vab/$n/instance_norm.py'); m=importlib.util.module_from_spec(s); s.loader.exec_module(m); m.load_extension(); print('built')" > $OUT/build_$n.txt 2>&1 &
done
timeout 400 python3 -c "import instance_norm; instance_norm.load_extension(); print('built')" > $OUT/build.txt 2>&1
wait
for f in build "${NAMES[@]/#/build_}"; do
  grep -qx built $OUT/$f.txt || { echo "build failed $f"; tail -5 $OUT/$f.txt; exit 1; }
done
