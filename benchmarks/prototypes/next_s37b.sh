#!/usr/bin/env bash
# Prepared in the thirty-second session, from its reviews of the register rows (benchmarks/NOTES.md):
# - rowsbit (flat_rows_bit_s36.patch + flat_rows_bit_tests_s36.patch): the host's FlatShape.rows decides the
#   path (the committed kernel takes rows wherever G * 8 >= M, so instances of up to 8 elements take them on
#   any grid, past the cut too, untimed); the refusal sizes with the smaller G; a NaN instance's m2 clamps to 0
#   as every other partial does; the cut's test covers every rows G and the named flat plan past 144.
# - direct (flat_rows_direct_s36.patch = rowsbit + the rows loaded straight from global memory: no span copy
#   or barrier on that path, as quack's LayerNorm at such rows).
# - tmpl (flat_rows_tmpl_s36.patch = direct + the rows as their own kernel instance, flat_kernel<Op, true>, so
#   that the span path keeps its registers: ptxas 27-32 against the committed 37-40, the rows 40-45, no
#   spills; ptxas_flat_rows_s36.txt), with the cut and without it (flat_rows_tmpl_uncut_s36.patch).
# A/B against the committed file at shapes of up to 8 elements on large grids (where rowsbit changes the path),
# past the cut (64x256x7x7, 64x256x12x12, 128x512x8x8) and within it; then the flat and cut tests on tmpl with
# rowsbit's tests. The full suite on whichever is kept comes in the next call. Run on a clean tree.
#   run(command="bash benchmarks/prototypes/next_s37b.sh", timeout_s=600)
set -uo pipefail
source benchmarks/prototypes/ab_env.sh rowsbit benchmarks/prototypes/flat_rows_bit_s36.patch \
  direct benchmarks/prototypes/flat_rows_direct_s36.patch tmpl benchmarks/prototypes/flat_rows_tmpl_s36.patch \
  tmpluncut benchmarks/prototypes/flat_rows_tmpl_uncut_s36.patch
SH=1024x256x2x2,512x256x1x7,256x512x2x3,64x256x7x7,64x256x12x12,128x512x8x8,16x256x12x12,32x64x8x8,16x128x12x12,64x96x5x5
timeout 240 python3 benchmarks/prototypes/pdl_ab_s21.py base=instance_norm.py rowsbit=/tmp/vab/rowsbit/instance_norm.py \
  direct=/tmp/vab/direct/instance_norm.py tmpl=/tmp/vab/tmpl/instance_norm.py tmpluncut=/tmp/vab/tmpluncut/instance_norm.py \
  --rounds 2 --cases fwd,train \
  --shapes $SH --dtypes float32,bfloat16 > $OUT/ab.txt 2>&1
echo "A/B rc=$? at $((SECONDS - START)) s"
python3 benchmarks/prototypes/ab_verdict.py $OUT/ab.txt --rows 40 --worst 6 | tee $OUT/verdict.txt
git apply benchmarks/prototypes/flat_rows_tmpl_s36.patch benchmarks/prototypes/flat_rows_bit_tests_s36.patch &&
  trap 'git apply -R benchmarks/prototypes/flat_rows_tmpl_s36.patch benchmarks/prototypes/flat_rows_bit_tests_s36.patch' EXIT
timeout $((590 - (SECONDS - START))) python3 -m pytest -q tests/test_gpu.py tests/test_epilogue.py -p no:cacheprovider \
  -k "flat or rows_cut or low_precision_module or nan" > $OUT/tests_tmpl.txt 2>&1
echo "tests (tmpl) rc=$? at $((SECONDS - START)) s"; tail -2 $OUT/tests_tmpl.txt
(cd $OUT && tar czf logs.tgz build*.txt device.txt && rm -f build*.txt device.txt)
