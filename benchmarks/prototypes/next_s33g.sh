#!/usr/bin/env bash
# Twenty-ninth session: the GPU suite on the final file (split_forward with the float32 cut at 5 vectors
# a thread), and the plans it chooses at the A/B shapes of next_s33e.sh / next_s33f.sh.
#   run(command="bash benchmarks/prototypes/next_s33g.sh", timeout_s=600)
set -uo pipefail
source benchmarks/prototypes/device_base.sh
python3 - <<'PY' > $OUT/plans.txt 2>&1
import torch, instance_norm as m
for t in ("2x10x384x384,1x40x352x352,4x12x416x416,1x40x288x288,2x40x480x480,1x20x480x480,1x100x256x256,"
          "3x16x400x400,1x128x384x384,2x64x300x300,1x64x400x400,1x128x416x416,1x24x352x352").split(","):
    for dt in (torch.float32, torch.bfloat16):
        print(t, dt, m.chosen_plan(torch.empty(tuple(int(v) for v in t.split("x")), device="cuda", dtype=dt)))
PY
cat $OUT/plans.txt
timeout $((590 - (SECONDS - START))) python3 -m pytest -q tests -p no:cacheprovider > $OUT/suite.txt 2>&1
echo "suite rc=$? at $((SECONDS - START)) s"; tail -2 $OUT/suite.txt
(cd $OUT && tar czf logs.tgz build*.txt device.txt && rm -f build*.txt device.txt)
