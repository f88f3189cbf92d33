#!/usr/bin/env bash
# Twenty-ninth session: where multi_cta beats the default plan at few instances of 64K-256K elements
# (call 1, next_s33c.sh: in graph replay multi_cta took 0.78-0.88x the default at fp32 (2,8,384,384),
# (4,8,384,384), (2,16,320,320), (1,16,448,448)). A grid (1, I, S, S), I = 8..96, S = 256..512, both
# dtypes, forward and backward, graph replay and do_bench: multi_cta and the default (tune.py --match).
#   run(command="bash benchmarks/prototypes/next_s33d.sh", timeout_s=600)
set -uo pipefail
source benchmarks/prototypes/device_base.sh
SH=$(python3 -c "print(','.join(f'1x{i}x{s}x{s}' for i in (8,12,16,24,32,48,64,96) for s in (256,320,384,448,512)))")
n=4
for dir in "" --backward; do
  for mode in --graph ""; do
    t=$(( (580 - (SECONDS - START)) / n )); n=$((n - 1))
    timeout $t python3 benchmarks/tune.py $mode $dir --match multi_cta --top 1 --shapes $SH --dtypes float32,bfloat16 \
      > $OUT/grid${dir}${mode}.txt 2>&1
    echo "grid${dir}${mode} rc=$? at $((SECONDS - START)) s"
  done
done
(cd $OUT && tar czf logs.tgz build*.txt device.txt && rm -f build*.txt device.txt)
