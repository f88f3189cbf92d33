#!/usr/bin/env bash
# Thirty-sixth session, call 4: where the process exits (status 1, no traceback, no signal; compute-sanitizer:
# 0 errors) on rows_width_s40.patch's first wide-access call: gdb's backtrace at exit_group, else strace.
set -uo pipefail
START=$SECONDS
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 INSTANCE_NORM_REQUIRE_GPU=1 TORCH_EXTENSIONS_DIR=/tmp/ext MAX_JOBS=16
P=benchmarks/prototypes
git apply $P/rows_width_s40.patch || exit 1
trap 'git apply -R $P/rows_width_s40.patch' EXIT
timeout 300 python3 -c "import instance_norm; instance_norm.load_extension(); print('built')" > $OUT/build.txt 2>&1
echo "build rc=$? at $((SECONDS - START)) s"
timeout 60 python3 -X faulthandler $P/diag_s40c.py > $OUT/diag.txt 2>&1; echo "diag rc=$?"; tail -c 300 $OUT/diag.txt; echo
which gdb strace
if which gdb >/dev/null; then
  timeout 120 gdb -batch -ex "catch syscall exit_group" -ex run -ex bt -ex "info threads" -ex "thread apply all bt 8" --args python3 $P/diag_s40c.py > $OUT/gdb.txt 2>&1
  echo "gdb rc=$?"; grep -n "^#" $OUT/gdb.txt | head -40
elif which strace >/dev/null; then
  timeout 120 strace -f -k -e trace=exit_group,exit,write -o $OUT/strace.txt python3 $P/diag_s40c.py > /dev/null 2>&1
  echo "strace rc=$?"; grep -n -B2 -A30 "exit_group" $OUT/strace.txt | head -80
fi
