#!/usr/bin/env bash
# Thirty-fourth session, call 6: per-kernel device times (torch.profiler) of the forward, the affine forward and
# the training step at (1024,256,4,4) for the final file (rows there) and full4 (flat_rows_full4_final_s38.patch:
# the span forward there), to find which kernel the training step's 0.90x is in.
#   run(command="bash benchmarks/prototypes/next_s38g.sh", timeout_s=280)
set -uo pipefail
source benchmarks/prototypes/ab_env.sh full4 benchmarks/prototypes/flat_rows_full4_final_s38.patch
timeout 100 python3 benchmarks/prototypes/prof_train_s38.py base=instance_norm.py full4=/tmp/vab/full4/instance_norm.py \
  --shapes 1024x256x4x4 > $OUT/prof.txt 2>&1
echo "prof rc=$? at $((SECONDS - START)) s"; grep "us of kernels" $OUT/prof.txt
(cd $OUT && tar czf logs.tgz build*.txt device.txt && rm -f build*.txt device.txt)
