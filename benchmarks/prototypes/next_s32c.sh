#!/usr/bin/env bash
# Prepared in the twenty-seventh session (no carry): wide16 (wide16_s32.patch), the forward's wide plan
# (K=16, CS=8, one stage) in place of a K=8 stream plan of clusters of 16 whose few instances need more
# than one wave of resident clusters, where the wide plan's clusters hold them all at once. Of the rules
# wide_rule_fit.py scored on s31/call5 it is the one with no loss (3 shapes, graph replay geomean 0.987,
# do_bench 0.989); next_s32b.sh's grid should confirm or replace it first.
#   run(command="bash benchmarks/prototypes/next_s32c.sh", timeout_s=600)
# Same bits where the plan is unchanged (bitwise_ab.py; where wide16 changes the plan the bits may differ:
# another split of the reduction), the plans it picks, then A/B: the forward and the
# fused gelu forward (act) at float32 few-instance shapes, 5 rounds, and the verdict.
set -uo pipefail
SH=1x8x512x512,2x8x384x384,1x16x384x384,1x12x448x448,1x3x512x512,4x8x512x512,2x4x512x512
bash benchmarks/prototypes/patch_ab.sh wide16 benchmarks/prototypes/wide16_s32.patch -- 14 \
  --rounds 5 --cases fwd,act --dtypes float32 --shapes $SH
# The plans it picked (after the A/B, so that a failure here costs no timing).
PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=/tmp/ext timeout 60 python3 -c "
import importlib.util, torch
s = importlib.util.spec_from_file_location('w', '/tmp/vab/wide16/instance_norm.py'); m = importlib.util.module_from_spec(s); s.loader.exec_module(m)
for t in '$SH'.split(','):
    shape = tuple(int(v) for v in t.split('x'))
    for d in (torch.float32, torch.bfloat16):
        print(shape, d, m.chosen_plan(torch.empty(shape, device='cuda', dtype=d)))
" > $OUT/plans.txt 2>&1; cat $OUT/plans.txt
