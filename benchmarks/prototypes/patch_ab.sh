#!/usr/bin/env bash
# The A/B of patched copies of instance_norm.py against the repository's file, in one device call
# (twenty-seventh session; the next_s2x/s3x scripts repeated these steps by hand):
#   bash benchmarks/prototypes/patch_ab.sh NAME PATCH [NAME2 PATCH2 ...] -- ROWS PDL_AB_ARGS...
# builds every variant and the base (patch_ab_build.sh), checks same bits per variant (bitwise_ab.py:
# $OUT/bitwise_NAME.txt), runs pdl_ab_s21.py with base and every variant and PDL_AB_ARGS ($OUT/ab.txt,
# up to 585 s after the start), then ab_verdict.py --rows ROWS ($OUT/verdict.txt), and packs the build
# logs (about 8 files come back from $OUT). Run from the repository root with $OUT set.
set -uo pipefail
START=$SECONDS
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 INSTANCE_NORM_REQUIRE_GPU=1 TORCH_EXTENSIONS_DIR=/tmp/ext MAX_JOBS=8
PAIRS=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do PAIRS+=("$1"); shift; done
[ $# -ge 2 ] && [ ${#PAIRS[@]} -ge 2 ] || { echo "usage: patch_ab.sh NAME PATCH ... -- ROWS PDL_AB_ARGS..."; exit 1; }
shift; ROWS=$1; shift
bash benchmarks/prototypes/patch_ab_build.sh "${PAIRS[@]}" || exit 1
echo "built at $((SECONDS - START)) s"
FILES=(base=instance_norm.py)
for ((i = 0; i < ${#PAIRS[@]}; i += 2)); do
  v=${PAIRS[i]}
  FILES+=("$v=/tmp/vab/$v/instance_norm.py")
  timeout 150 python3 benchmarks/prototypes/bitwise_ab.py instance_norm.py /tmp/vab/$v/instance_norm.py > $OUT/bitwise_$v.txt 2>&1
  echo "$v $(tail -1 $OUT/bitwise_$v.txt)"
done
echo "bitwise at $((SECONDS - START)) s"
timeout $((585 - (SECONDS - START))) python3 benchmarks/prototypes/pdl_ab_s21.py "${FILES[@]}" "$@" > $OUT/ab.txt 2>&1
grep -v "^loaded" $OUT/ab.txt | cut -c1-170; echo "A/B done at $((SECONDS - START)) s"
python3 benchmarks/prototypes/ab_verdict.py $OUT/ab.txt --rows "$ROWS" --worst 3 | tee $OUT/verdict.txt
(cd $OUT && tar czf logs.tgz build*.txt device.txt && rm -f build*.txt)
echo "done at $((SECONDS - START)) s"
