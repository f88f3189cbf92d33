#!/usr/bin/env bash
# Prepared in the twenty-seventh session for the next one's first device call (no carry):
#   run(command="bash benchmarks/prototypes/next_s32.sh", timeout_s=600)
# ncu (s31/call7, main float32 backward, stream(CS=16,S=1) K=8): 12.4 % of the stall samples sit on
# `FADD R3, -R88, R60` (x - mean; long scoreboard: the saved statistics' global load, issued after the
# barrier that precedes the refill). 19.5 % wait for the slice's copy, about 24 % on register reuse
# behind the dx stores (store back-pressure).
# ke (known_early_s32.patch): the float32 non-run-ahead path asks for the coefficients after reading
#   its slice and before the fence and barrier, so that the barrier's wait covers their latency.
# kw (known_wait_s32.patch): before the wait on the slice's copy (the twenty-fifth session measured
#   +8.7 % for that, before eif; a control).
# Only the float32 K=8 stream backward kernels and the forward's float32 K=16 kernels change.
# Same bits first; A/B 5 rounds; the verdict. If ke wins: the suite (next_s31b.sh style) and land it.
set -uo pipefail
bash benchmarks/prototypes/patch_ab.sh ke benchmarks/prototypes/known_early_s32.patch \
  kw benchmarks/prototypes/known_wait_s32.patch -- 12 --rounds 5 --cases bwd,bwdaff,train --dtypes float32 \
  --shapes 112x64x512x512,8x32x512x512,16x16x448x448,2x8x384x384
