#!/usr/bin/env bash
# Thirty-fourth session, call 2. s38/call1 showed the training-step losses of the wider rows rule follow the
# rows themselves (nofull: the forward alone loses 1.09-1.33x where the 3/4-full clause is dropped, yet the
# training step gains 0.90-0.96x at (1024,256,4,4) and bf16 (128|256,512,8,8)). The rows store their outputs
# with plain stores (evict-normal in L2); the span path stores its vectors with __stcs (st.global.cs,
# evict-first). Hypothesis: the rows' outputs push the input out of L2 before the backward re-reads it (and,
# replayed back to back, before the next forward reads it).
# - cs (flat_rows_cs_s38.patch): the rows store through store_streaming (st.global.cs per element);
# - csfull4 (flat_rows_csfull4_s38.patch): cs, and the 3/4-full clause only from G >= 4 (kFlatRowsFullGroup);
# - full4 (flat_rows_full4_s38.patch): the clause from G >= 4 alone;
# - spanleancs (flat_span_lean_cs_s38.patch): spanlean (s38/call1: forward 0.90-0.98x past the rows, fp32
#   training step 1.02-1.035x at small shapes) with cs;
# - rows128 (flat_rows128_s37.patch): the rows in 128-thread CTAs.
# Then the flat tests on spanleancs with flat_rows_cut_tests_s37.patch.
#   run(command="bash benchmarks/prototypes/next_s38c.sh", timeout_s=600)
set -uo pipefail
source benchmarks/prototypes/ab_env.sh cs benchmarks/prototypes/flat_rows_cs_s38.patch \
  csfull4 benchmarks/prototypes/flat_rows_csfull4_s38.patch full4 benchmarks/prototypes/flat_rows_full4_s38.patch \
  spanleancs benchmarks/prototypes/flat_span_lean_cs_s38.patch rows128 benchmarks/prototypes/flat_rows128_s37.patch
SH=1024x256x4x4,128x512x8x8,256x512x8x8,128x256x10x10,512x256x5x5,64x256x7x7,16x256x12x12,32x256x7x7,64x256x12x12,256x256x6x6,512x256x1x7,256x512x2x3,2048x256x3x4,1024x256x2x2
timeout 330 python3 benchmarks/prototypes/pdl_ab_s21.py base=instance_norm.py cs=/tmp/vab/cs/instance_norm.py \
  csfull4=/tmp/vab/csfull4/instance_norm.py full4=/tmp/vab/full4/instance_norm.py \
  spanleancs=/tmp/vab/spanleancs/instance_norm.py rows128=/tmp/vab/rows128/instance_norm.py --rounds 3 --cases fwd,train \
  --shapes $SH --dtypes float32,bfloat16 > $OUT/ab.txt 2>&1
echo "A/B rc=$? at $((SECONDS - START)) s"
python3 benchmarks/prototypes/ab_verdict.py $OUT/ab.txt --rows 56 --worst 8 | tee $OUT/verdict.txt
git apply benchmarks/prototypes/flat_span_lean_cs_s38.patch benchmarks/prototypes/flat_rows_cut_tests_s37.patch &&
  trap 'git apply -R benchmarks/prototypes/flat_span_lean_cs_s38.patch benchmarks/prototypes/flat_rows_cut_tests_s37.patch' EXIT
timeout $((590 - (SECONDS - START))) python3 -m pytest -q tests/test_gpu.py tests/test_epilogue.py -p no:cacheprovider \
  -k "flat or rows_cut or low_precision_module or nan" > $OUT/tests_spanleancs.txt 2>&1
echo "tests (spanleancs) rc=$? at $((SECONDS - START)) s"; tail -2 $OUT/tests_spanleancs.txt
(cd $OUT && tar czf logs.tgz build*.txt device.txt && rm -f build*.txt device.txt)
