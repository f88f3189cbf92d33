#!/usr/bin/env bash
# Prepared in the twenty-sixth session (no carry): where the float32 main backward's stream kernel
# (stream(CS=16,S=1), K=8; eif landed) stalls, per SASS instruction, and the same for eis when
# next_s31c.sh built it on this machine (/tmp/vab/eis). Issue 12: 1.12x the floor, target 1.10x.
#   run(command="bash benchmarks/prototypes/next_s31d.sh", timeout_s=600)
set -uo pipefail
START=$SECONDS
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 INSTANCE_NORM_REQUIRE_GPU=1 TORCH_EXTENSIONS_DIR=/tmp/ext MAX_JOBS=8
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv; md5sum instance_norm.py; } > $OUT/device.txt 2>&1
timeout 300 python3 -c "import instance_norm; instance_norm.load_extension()" > $OUT/build.txt 2>&1 || { tail -5 $OUT/build.txt; exit 1; }
V="base:instance_norm.py"
[ -f /tmp/vab/eis/instance_norm.py ] && V="$V eis:/tmp/vab/eis/instance_norm.py"
S="--section SpeedOfLight --section WarpStateStats --section SourceCounters --section MemoryWorkloadAnalysis"
for v in $V; do
  n=${v%%:*} f=${v#*:}
  [ $((SECONDS - START)) -lt 450 ] || { echo "stopped before $n: $((SECONDS - START)) s gone"; break; }
  timeout 150 ncu --clock-control none --profile-from-start off -k regex:stream_kernel $S --import-source no \
    -o $OUT/main32_$n python3 benchmarks/prototypes/ncu_aff_s27.py $f 112 64 512 512 float32 plain > $OUT/ncu_$n.txt 2>&1
  ncu -i $OUT/main32_$n.ncu-rep --page source --csv --print-source sass 2>/dev/null | gzip > $OUT/main32_${n}_sass.csv.gz
  ncu -i $OUT/main32_$n.ncu-rep --page details > $OUT/main32_${n}_details.txt 2>&1
  echo "== $n"; grep -i "duration\|DRAM Throughput\|Warp Cycles Per Issued" $OUT/main32_${n}_details.txt | head -4
  python3 benchmarks/prototypes/sass_stalls.py $OUT/main32_${n}_sass.csv.gz --top 25 | tee $OUT/stalls_$n.txt | cut -c1-150
  rm -f $OUT/main32_$n.ncu-rep $OUT/ncu_$n.txt
done
tar czf $OUT/details.tgz -C $OUT $(cd $OUT && ls main32_*_details.txt) && rm -f $OUT/main32_*_details.txt
echo "done at $((SECONDS - START)) s"
