#!/usr/bin/env bash
# Forty-first session, call 2: the suite on the winner of next_s45a.sh (a *_full_s44.patch: its kernel change, the
# pairwise-tree helper add_parts_pairwise shared by batch_sums and channel_rows_kernel, and the test comment made
# plan-agnostic), or with no winner on pairtree_full_s44.patch (the helper alone: the same arithmetic in the same order).
# About 430 s (s44/call2: 418 s of pytest). Land the patch the suite ran on (compare md5 with $OUT/md5.txt).
#   run(command="bash benchmarks/prototypes/next_s45b.sh benchmarks/prototypes/WINNER_full_s44.patch", timeout_s=600)
#   run(command="bash benchmarks/prototypes/next_s45b.sh benchmarks/prototypes/pairtree_full_s44.patch", timeout_s=600)
set -uo pipefail
P=benchmarks/prototypes
START=$SECONDS
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 INSTANCE_NORM_REQUIRE_GPU=1 TORCH_EXTENSIONS_DIR=/tmp/ext MAX_JOBS=16
source $P/suite_with_patch.sh $1 590
