#!/usr/bin/env bash
# Thirty-first session, call 3 (carry [".whlB"], right after next_s35b.sh on the same warm machine):
# install the CuTe-DSL peer, then bench.py --cute at the sweep's shapes, one process per dtype (issue 12's
# table: ours, eager, torch.compile, F.group_norm, quack's LayerNorm, the copy; same run).
#   run(command="bash benchmarks/prototypes/next_s35c.sh DTYPE...", carry=[".whlB"], timeout_s=590)
set -uo pipefail
source benchmarks/prototypes/device_base.sh
source benchmarks/quack_wheels.sh install > $OUT/install.txt 2>&1 || { cat $OUT/install.txt; exit 1; }
tail -2 $OUT/install.txt; echo "installed at $((SECONDS - START)) s"
for d in "$@"; do
  timeout $((580 - (SECONDS - START))) python3 benchmarks/bench.py --cute --dtypes $d --out $OUT/cute_$d > $OUT/cute_$d.txt 2>&1
  echo "bench $d rc=$? at $((SECONDS - START)) s"; grep -B2 -A14 "do_bench median" $OUT/cute_$d.txt | head -40
  rm -f $OUT/cute_$d/bandwidth.png
done
(cd $OUT && tar czf logs.tgz build*.txt device.txt && rm -f build*.txt device.txt)
