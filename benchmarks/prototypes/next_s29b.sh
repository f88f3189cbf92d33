#!/usr/bin/env bash
# Prepared in the twenty-fourth session: the mutants it had no device time for (it ran gradient_term,
# activation_gradient and affine_channel_index on the new file, all killed). Builds five mutants in
# parallel (about 4 minutes), then the GPU tests against each, stopping at the first failure.
#   run(command="bash benchmarks/prototypes/next_s29b.sh", timeout_s=600)
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 INSTANCE_NORM_REQUIRE_GPU=1
md5sum instance_norm.py > $OUT/device.txt
timeout 580 python3 benchmarks/mutate.py --only variance_normalizer,boundary_element,missing_barrier,residual_dropped,cluster_exchange \
  > $OUT/mutate.txt 2>&1; echo "rc=$?" >> $OUT/mutate.txt; tail -12 $OUT/mutate.txt
