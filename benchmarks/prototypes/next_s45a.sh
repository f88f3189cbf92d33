#!/usr/bin/env bash
# Forty-first session, call 1 (prepared in the fortieth; builds checked locally, not run on a GPU). The row pass
# landed in the fortieth (7e54702: 2 CTAs an SM of 256 threads, from N 4096 up to C 256). Under ncu (s44/call2)
# it read 8.4 MB in 9.15 us (0.9 TB/s) at fp32 (4096,256,2,2), 16 rows a thread in series: latency, not bytes.
# s44/call5: more CTAs (4 or 8 an SM) won at (16384,128,2,2) (graph 0.85-0.95x) and (4096,256,2,2) (0.94-0.99x)
# but lost at (8192,32,2,2) and (4096,64,4,4) (1.02-1.32x), where each CTA then summed 512 (row, channel) pairs.
# Variants against HEAD: rt512 / rt1024, CTAs of 512 / 1024 threads (more rows in flight a CTA, as many
# partials); rowwork, up to 8 CTAs an SM while each sums 1024 pairs at least (the CTA counts of c4/c8 where they
# won, HEAD's where they lost). A/B on the affine backward and training step, 32 rows.
# Then the L2-tile prototype for issue 11 (below).
#   run(command="bash benchmarks/prototypes/next_s45a.sh", timeout_s=600)
set -uo pipefail
P=benchmarks/prototypes
source $P/ab_env.sh rt512 $P/rt512_full_s44.patch rt1024 $P/rt1024_full_s44.patch rowwork $P/rowwork_full_s44.patch
SH=4096x256x2x2,8192x32x2x2,4096x64x4x4,16384x128x2x2,8192x256x2x2,32768x8x2x2,4096x128x4x4,4096x256x7x7
timeout $((585 - (SECONDS - START))) python3 $P/pdl_ab_s21.py base=instance_norm.py rt512=/tmp/vab/rt512/instance_norm.py \
  rt1024=/tmp/vab/rt1024/instance_norm.py rowwork=/tmp/vab/rowwork/instance_norm.py --rounds 2 --cases bwdaff,train \
  --shapes $SH --dtypes float32,bfloat16 > $OUT/ab.txt 2>&1
echo "A/B rc=$? at $((SECONDS - START)) s"
python3 $P/ab_verdict.py $OUT/ab.txt --rows 32 --worst 8 | tee $OUT/verdict.txt
# Issue 11, with what is left (the base build above is cached for --ours): proto_l2tile_s44.py, a channels-last norm
# one sample at a time so that the second read of x may come from the L2 (Triton, CUDA-graph replay against the copy;
# its kernels checked on the CPU with TRITON_INTERPRET=1 against F.instance_norm in float64, three odd plans).
LEFT=$((595 - (SECONDS - START)))
[ $LEFT -gt 60 ] && timeout $LEFT python3 $P/proto_l2tile_s44.py --ours > $OUT/l2tile.txt 2>&1; echo "l2tile rc=$? at $((SECONDS - START)) s"
grep -E "^[a-z]|stat_ctas|ModelNew" $OUT/l2tile.txt | cut -c1-150 | head -20
LEFT=$((595 - (SECONDS - START)))
[ $LEFT -gt 90 ] && timeout $LEFT python3 $P/proto_l2tile_s44.py --ours --nchw --shape 1x2x4096x4096 > $OUT/l2tile_nchw.txt 2>&1
echo "l2tile nchw rc=$? at $((SECONDS - START)) s"; grep -E "^[a-z]|stat_ctas|ModelNew" $OUT/l2tile_nchw.txt | cut -c1-150 | head -20
(cd $OUT && tar czf logs.tgz build*.txt device.txt 2>/dev/null && rm -f build*.txt device.txt)
