#!/usr/bin/env bash
# Twenty-fourth session, third call (no carry). lfb = lfpk with the kernels that have an activation, and
# those reading running statistics, compiled as the base compiles them, and the others as lfpkna compiles
# them (sass_cmp_s25.py, locally: base/lfb 225 of 261 kernels identical, the 36 others all plain
# saved-statistics backward kernels; lfpkna/lfb: every one of those 36 identical). Call 2: lfpkna geomean
# 0.969 over 46 rows, its one consistent loss (fp16 gelu training step (8,512,32,32), 1.041) in a kernel
# whose SASS is now the base's. 1. A short A/B base / lfb (the activated training steps and the rows lf
# and pk were for). 2. The full GPU suite on lfb, in the device's copy.
set -uo pipefail
START=$SECONDS
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 INSTANCE_NORM_REQUIRE_GPU=1 TORCH_EXTENSIONS_DIR=/tmp/ext MAX_JOBS=8
bash benchmarks/prototypes/variants_s27.sh > $OUT/variants.txt 2>&1 || { cat $OUT/variants.txt; exit 1; }
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv; md5sum instance_norm.py /tmp/v/lfb/instance_norm.py; } > $OUT/device.txt 2>&1
timeout 300 python3 -c "import importlib.util; s=importlib.util.spec_from_file_location('lfb','/tmp/v/lfb/instance_norm.py'); m=importlib.util.module_from_spec(s); s.loader.exec_module(m); m.load_extension(); print('built')" > $OUT/build_lfb.txt 2>&1 &
timeout 300 python3 -c "import instance_norm; instance_norm.load_extension(); print('built')" > $OUT/build.txt 2>&1
wait; echo "built at $((SECONDS - START)) s"
for f in $OUT/build*.txt; do grep -qx built $f || { echo "build failed $f"; tail -5 $f; exit 1; }; done
AB="timeout 100 python3 benchmarks/prototypes/pdl_ab_s21.py base=instance_norm.py lfb=/tmp/v/lfb/instance_norm.py --rounds 3"
{
$AB --cases acttrain --dtypes float32,bfloat16,float16 --shapes 1x16x64x64,8x512x32x32
$AB --cases bwd,bwdaff,train --dtypes bfloat16,float16,float32 --shapes 8x512x32x32
} > $OUT/ab.txt 2>&1
grep -v "^loaded" $OUT/ab.txt | cut -c1-150
echo "ab done at $((SECONDS - START)) s"
cp /tmp/v/lfb/instance_norm.py instance_norm.py && md5sum instance_norm.py >> $OUT/device.txt
timeout $((585 - (SECONDS - START))) python3 -m pytest -q tests -p no:cacheprovider > $OUT/pytest_full.txt 2>&1
echo "pytest rc=$?" >> $OUT/pytest_full.txt; tail -3 $OUT/pytest_full.txt
echo "suite done at $((SECONDS - START)) s"
