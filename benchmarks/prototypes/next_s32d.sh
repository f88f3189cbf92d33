#!/usr/bin/env bash
# Twenty-eighth session, call 3: where the float32 K=8 stream backward asks for its coefficients.
# Call 1 (next_s32.sh): ke (before the fence and barrier) main bwd 0.989, bwdaff 0.985, but
# (16,16,448,448) bwd 1.034 / 1.044 (consistent); kw (before the slice's wait) lost everywhere.
# kf: after the fence (which may wait for outstanding loads) and before the barrier.
# kev: ke only where the slice is even (every thread the same whole vectors; 448's slices are not).
set -uo pipefail
bash benchmarks/prototypes/patch_ab.sh ke benchmarks/prototypes/known_early_s32.patch \
  kf benchmarks/prototypes/known_fence_s32.patch kev benchmarks/prototypes/known_even_s32.patch -- 12 \
  --rounds 5 --cases bwd,bwdaff,train --dtypes float32 \
  --shapes 112x64x512x512,8x32x512x512,16x16x448x448,2x8x384x384
