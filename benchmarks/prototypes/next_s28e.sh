#!/usr/bin/env bash
# Twenty-fourth session, fourth call: lfb (now instance_norm.py) against the previous commit's file
# (.scratch/base/instance_norm.py, carried: the device's git HEAD is stale) on the large backward rows
# that calls 1-3 did not cover: the main shape and (1,2,4096,4096), the backward op alone, plain and
# affine, float32 and bfloat16. lfb changes every plain saved-statistics backward kernel, the stream and
# multi-CTA ones too (Backward::known's channel modulo; the loads-first order is onchip_kernel's only).
# Then, in the time left, bench.py's main-shape float32 table on lfb.
#   run(command="bash benchmarks/prototypes/next_s28e.sh", carry=[".scratch/base"], timeout_s=500)
set -uo pipefail
START=$SECONDS
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 INSTANCE_NORM_REQUIRE_GPU=1 TORCH_EXTENSIONS_DIR=/tmp/ext MAX_JOBS=8
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv; md5sum instance_norm.py .scratch/base/instance_norm.py; } > $OUT/device.txt 2>&1
timeout 300 python3 -c "import importlib.util; s=importlib.util.spec_from_file_location('b','.scratch/base/instance_norm.py'); m=importlib.util.module_from_spec(s); s.loader.exec_module(m); m.load_extension(); print('built')" > $OUT/build_base.txt 2>&1 &
timeout 300 python3 -c "import instance_norm; instance_norm.load_extension(); print('built')" > $OUT/build.txt 2>&1
wait; echo "built at $((SECONDS - START)) s"
for f in $OUT/build*.txt; do grep -qx built $f || { echo "build failed $f"; tail -5 $f; exit 1; }; done
timeout $((320 - (SECONDS - START))) python3 benchmarks/prototypes/pdl_ab_s21.py base=.scratch/base/instance_norm.py \
  lfb=instance_norm.py --rounds 3 --cases bwd,bwdaff --dtypes float32,bfloat16 --shapes 112x64x512x512,1x2x4096x4096 \
  > $OUT/ab_large.txt 2>&1
grep -v "^loaded" $OUT/ab_large.txt | cut -c1-400
echo "ab done at $((SECONDS - START)) s"
# What time is left: the main shape's peer table in float32 on lfb (bench.py, do_bench; the last one is
# the twenty-second session's, 1.27x the floor backward).
[ $((SECONDS - START)) -lt 330 ] && timeout $((480 - (SECONDS - START))) python3 benchmarks/bench.py --quick --backward \
  --dtypes float32 --shapes 112x64x512x512 --out $OUT/main32 > $OUT/bench_main32.txt 2>&1; echo "rc=$?" >> $OUT/bench_main32.txt
grep -h "forward \|backward \|rc=" $OUT/bench_main32.txt | head; tar czf $OUT/main32.tgz -C $OUT main32 2>/dev/null; rm -rf $OUT/main32
echo "done at $((SECONDS - START)) s"
