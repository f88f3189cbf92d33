#!/usr/bin/env bash
# Thirtieth session, call 2: the grid plans (the stream kernel without clusters: groups of P = 16 or 32 CTAs of
# a cooperative grid per instance, partials through global memory). Their GPU tests, then tune.py at
# few-instance shapes (where 7 resident clusters of 16 take 8 instances in two waves, and instances of 1-2 MiB
# that no cluster holds), forward and backward, graph replay and do_bench.
#   run(command="bash benchmarks/prototypes/next_s34b.sh", timeout_s=590)
set -uo pipefail
source benchmarks/prototypes/device_base.sh
timeout 200 python3 -m pytest -x -q tests/test_gpu.py -k "grid or candidate_plans_all_run or float64_only" \
  > $OUT/tests_grid.txt 2>&1
echo "tests rc=$? at $((SECONDS - START)) s"; tail -3 $OUT/tests_grid.txt
timeout 60 python3 -m pytest -x -q tests/test_epilogue.py -k "grid" > $OUT/tests_grid_epilogue.txt 2>&1
echo "epilogue tests rc=$? at $((SECONDS - START)) s"; tail -2 $OUT/tests_grid_epilogue.txt
F32=1x8x384x384,1x8x512x512,2x8x384x384,1x16x320x320,1x12x512x512,1x8x640x640,2x4x704x704
B16=1x8x512x512,2x8x384x384,1x8x768x768,1x8x1024x1024
for dir in "" --backward; do
  for mode in --graph ""; do
    f=$OUT/tune$dir$mode.txt
    timeout 70 python3 benchmarks/tune.py $mode $dir --match grid,stream,multi_cta --shapes $F32 --dtypes float32 --top 6 > $f 2>&1
    timeout 50 python3 benchmarks/tune.py $mode $dir --match grid,stream,multi_cta --shapes $B16 --dtypes bfloat16 --top 6 >> $f 2>&1
    echo "tune$dir$mode at $((SECONDS - START)) s"
  done
done
(cd $OUT && tar czf logs.tgz build*.txt device.txt && rm -f build*.txt device.txt)
