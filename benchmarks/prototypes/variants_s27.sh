#!/usr/bin/env bash
# The twenty-third session's variants of instance_norm.py, made in /tmp/v/<name> from the repository's
# patches (run from the repository root):
#   lf    loads_first_s26.patch             the backward's data loads before its per-instance prologue
#   pk    packed_regs_s27.patch             the register path's backward keeps packed words, not floats,
#                                           live across the reduction (bf16 K=4: 99 -> 64 registers)
#   lfpk  lf + packed_regs_s27.patch (applied with one line of context: lf moves the lines around it)
#   rc    recip_s27.patch                   instance_size and 1 / instance_size from the host (Params)
#   lfr   lf + recip_s27.patch
#   lfpkna lfpk + act_known_first_s28.patch: kernels with an activation keep the coefficients first
#         (twenty-fourth session: lf cost a float32 gelu training step 6 %)
#   lfb   lfpkna + act_known_base_s28.patch: Backward::known as before for those kernels and for running
#         statistics (sass_cmp_s25.py: their SASS is the base's; the other kernels' is lfpkna's)
# The patches apply to instance_norm.py md5 cea54740 (commit 35d6fa4). Since the twenty-fourth session
# the product file is lfb, so this script (and next_s28*.sh, which use it) now serve as the record of what
# ran; to rebuild a variant, start from `git show 35d6fa4:instance_norm.py`.
set -euo pipefail
rm -rf /tmp/v && mkdir -p /tmp/v
P="$PWD/benchmarks/prototypes"
for v in lf pk lfpk rc lfr lfpkna lfb; do
  mkdir -p /tmp/v/$v && cp instance_norm.py /tmp/v/$v/
  ( cd /tmp/v/$v && git init -q
    case $v in
      lf) git apply "$P/loads_first_s26.patch" ;;
      pk) git apply "$P/packed_regs_s27.patch" ;;
      lfpk) git apply "$P/loads_first_s26.patch" && git apply -C1 "$P/packed_regs_s27.patch" ;;
      rc) git apply "$P/recip_s27.patch" ;;
      lfpkna) git apply "$P/loads_first_s26.patch" && git apply -C1 "$P/packed_regs_s27.patch" && git apply "$P/act_known_first_s28.patch" ;;
      lfb) git apply "$P/loads_first_s26.patch" && git apply -C1 "$P/packed_regs_s27.patch" && git apply "$P/act_known_first_s28.patch" && git apply "$P/act_known_base_s28.patch" ;;
      lfr) git apply "$P/loads_first_s26.patch" && git apply "$P/recip_s27.patch" ;;
    esac )
done
md5sum /tmp/v/*/instance_norm.py
