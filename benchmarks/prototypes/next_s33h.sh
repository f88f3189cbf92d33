#!/usr/bin/env bash
# Twenty-ninth session, the device time left (about 300 s): NOTES Next 1 and 2 of the twenty-ninth session.
# (1) the backward at fp32 (1,8,S,S), S = 384..512, every plan tune lists loosely (a second wave of one
# instance on clusters of 16 lost to multi_cta); (2) ncu of the forward's stream(CS=16,S=4) at fp32
# (1,96,384,384) (3.7 us per instance per cluster) and (1,96,512,512) (4.3 us per 1 MiB instance).
#   run(command="bash benchmarks/prototypes/next_s33h.sh", timeout_s=330)
set -uo pipefail
source benchmarks/prototypes/device_base.sh
for mode in --graph ""; do
  timeout 35 python3 benchmarks/tune.py $mode --loose --backward --shapes 1x8x384x384,1x8x448x448,1x8x512x512 \
    --dtypes float32 --top 8 > $OUT/tune_bwd_loose$mode.txt 2>&1
done
echo "tune at $((SECONDS - START)) s"
for s in 384 512; do
  timeout 50 ncu --clock-control none --profile-from-start off -k regex:stream_kernel \
    --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section Occupancy --section LaunchStats \
    python3 benchmarks/prototypes/ncu_fwd_plan_s33.py 1 96 $s $s float32 stream 8 0 16 4 > $OUT/ncu_fwd_1x96x$s.txt 2>&1
  echo "ncu $s rc=$? at $((SECONDS - START)) s"
done
(cd $OUT && tar czf logs.tgz build*.txt device.txt && rm -f build*.txt device.txt)
