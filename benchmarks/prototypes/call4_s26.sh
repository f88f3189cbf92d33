#!/usr/bin/env bash
# Twenty-second session, fourth call: the onchip backward's register budget and the register path's
# dynamic shared memory, A/B/n in one process (graph replay is the figure; do_bench of the training step
# is host-bound). .scratch/base.py = 8d5ecb2; vA: 16-bit backward K=4 from registers capped at 64
# registers (launch bound 1024); vB: vA + no dynamic shared memory on the register path (forward and
# backward); vC: vB + float32 backward K=8 from registers capped at 80 (launch bound 768).
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 INSTANCE_NORM_REQUIRE_GPU=1 TORCH_EXTENSIONS_DIR=/tmp/ext MAX_JOBS=4
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv; md5sum instance_norm.py .scratch/*.py; } > $OUT/device.txt 2>&1
for v in base vA vB vC; do
  python3 -c "import importlib.util; s=importlib.util.spec_from_file_location('$v','.scratch/$v.py'); m=importlib.util.module_from_spec(s); s.loader.exec_module(m); m.load_extension()" > $OUT/build_$v.txt 2>&1 &
done
wait; tail -2 $OUT/build_*.txt
AB="timeout 120 python3 benchmarks/prototypes/pdl_ab_s21.py base=.scratch/base.py vA=.scratch/vA.py vB=.scratch/vB.py vC=.scratch/vC.py --rounds 3"
{
$AB --cases train --dtypes float32,bfloat16,float16 --shapes 8x512x32x32,32x256x32x32
$AB --cases train --dtypes float32 --shapes 16x256x64x64
$AB --cases acttrain --dtypes float32 --shapes 8x512x32x32,16x256x64x64
$AB --cases fwd --dtypes float32,bfloat16 --shapes 8x512x32x32,4x128x128x128
} > $OUT/ab.txt 2>&1
grep -v "^loaded" $OUT/ab.txt | cut -c1-230
