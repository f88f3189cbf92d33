#!/usr/bin/env bash
# The tail every A/B device script repeated from the thirty-second session on (next_s37*..next_s39c.sh): PATCH
# applied in the tree (tests included), md5 of instance_norm.py and tests/ recorded in $OUT/md5.txt, the full
# suite into $OUT/suite.txt with what is left of a LIMIT-second call (START from ab_env.sh), the patch reverted
# on exit, the build logs packed. Sourced, so that START and OUT carry over:
#   source benchmarks/prototypes/suite_with_patch.sh PATCH [LIMIT]
SUITE_PATCH=$1
git apply "$SUITE_PATCH" || { echo "$SUITE_PATCH does not apply"; exit 1; }
trap 'git apply -R "$SUITE_PATCH"' EXIT
md5sum instance_norm.py tests/*.py > $OUT/md5.txt
timeout $((${2:-590} - (SECONDS - START))) python3 -m pytest -q tests -p no:cacheprovider > $OUT/suite.txt 2>&1
echo "suite ($(basename "$SUITE_PATCH")) rc=$? at $((SECONDS - START)) s"; tail -3 $OUT/suite.txt
(cd $OUT && ls build*.txt device.txt >/dev/null 2>&1 && tar czf logs.tgz build*.txt device.txt && rm -f build*.txt device.txt)
