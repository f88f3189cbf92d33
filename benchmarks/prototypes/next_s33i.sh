#!/usr/bin/env bash
# Twenty-ninth session, the last ~340 s of device time: after the review's comment-only mends to
# instance_norm.py (no code change from md5 c21e5f15, whose full suite passed in call 5), the build and
# the plan-choice, gradient and training tests on the exact final file (the full suite needs ~360 s held).
#   run(command="bash benchmarks/prototypes/next_s33i.sh", timeout_s=300)
set -uo pipefail
source benchmarks/prototypes/device_base.sh
timeout $((270 - (SECONDS - START))) python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py tests/test_training.py tests/test_epilogue.py \
  -k "chosen_plans or gradients_match or fused_wide or training_step or no_grad_path" > $OUT/suite_part.txt 2>&1
echo "tests rc=$? at $((SECONDS - START)) s"; tail -2 $OUT/suite_part.txt
(cd $OUT && tar czf logs.tgz build*.txt device.txt && rm -f build*.txt device.txt)
