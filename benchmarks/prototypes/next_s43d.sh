#!/usr/bin/env bash
# Forty-third session, call 4. s43/call3: narrow tiles at C 384-512 and N 4096 beat tiles of 8 (nb4kq lost
# 1.02-1.09x), so nb4k's rule stays. nb4k_mends_s43.patch: its comments with the figures of calls 2-3 and
# test_batch_sums' (4100, 40) (kernel code unchanged). The suite on it.
#   run(command="bash benchmarks/prototypes/next_s43d.sh", timeout_s=540)
set -uo pipefail
P=benchmarks/prototypes
START=$SECONDS
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 INSTANCE_NORM_REQUIRE_GPU=1 TORCH_EXTENSIONS_DIR=/tmp/ext MAX_JOBS=16
source $P/suite_with_patch.sh $P/nb4k_mends_s43.patch 530
