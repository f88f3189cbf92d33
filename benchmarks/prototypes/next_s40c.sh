#!/usr/bin/env bash
# Thirty-sixth session, call 3: why call 2 (next_s40b.sh) died silently (A/B rc=1 after "loaded", the suite cut
# at test 97, test_fused_every_regime's flat residual rows). rows_width_s40.patch applied in the tree; the cases
# one at a time (diag_s40c.py), under compute-sanitizer when the first run dies; the flat epilogue tests verbose.
set -uo pipefail
START=$SECONDS
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 INSTANCE_NORM_REQUIRE_GPU=1 TORCH_EXTENSIONS_DIR=/tmp/ext MAX_JOBS=16
P=benchmarks/prototypes
git apply $P/rows_width_s40.patch || exit 1
trap 'git apply -R $P/rows_width_s40.patch' EXIT
md5sum instance_norm.py > $OUT/md5.txt
timeout 300 python3 -c "import instance_norm; instance_norm.load_extension(); print('built')" > $OUT/build.txt 2>&1
echo "build rc=$? at $((SECONDS - START)) s"
timeout 60 python3 -X faulthandler $P/diag_s40c.py > $OUT/diag.txt 2>&1
echo "diag rc=$? at $((SECONDS - START)) s"; tail -5 $OUT/diag.txt
timeout 120 python3 -X faulthandler -m pytest -v -x tests/test_epilogue.py -k "fused_every_regime and flat" -p no:cacheprovider > $OUT/flat.txt 2>&1
echo "flat rc=$? at $((SECONDS - START)) s"; tail -5 $OUT/flat.txt
SAN=$(ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || which compute-sanitizer)
echo "sanitizer: $SAN"
[ -n "$SAN" ] && timeout 200 $SAN --print-limit 5 python3 $P/diag_s40c.py > $OUT/san.txt 2>&1
echo "san rc=$? at $((SECONDS - START)) s"; grep -m5 -i "error\|invalid\|misaligned" $OUT/san.txt; tail -3 $OUT/san.txt
(dmesg 2>&1 | tail -20; nvidia-smi) > $OUT/sys.txt 2>&1
