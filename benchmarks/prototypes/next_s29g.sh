#!/usr/bin/env bash
# Twenty-fifth session: the GPU suite on the file with ska and rc, then the main shape against the
# previous commit's file (3a09853, carried as .scratch/s29/prev.py), forward and backward, 3 rounds.
#   run(command="bash benchmarks/prototypes/next_s29g.sh", carry=[".scratch/s29"], timeout_s=600)
set -uo pipefail
START=$SECONDS
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 INSTANCE_NORM_REQUIRE_GPU=1 TORCH_EXTENSIONS_DIR=/tmp/ext MAX_JOBS=8
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv; md5sum instance_norm.py .scratch/s29/prev.py; } > $OUT/device.txt 2>&1
timeout 300 python3 -c "import importlib.util; s=importlib.util.spec_from_file_location('prev','.scratch/s29/prev.py'); m=importlib.util.module_from_spec(s); s.loader.exec_module(m); m.load_extension(); print('built')" > $OUT/build_prev.txt 2>&1 &
timeout 300 python3 -c "import instance_norm; instance_norm.load_extension(); print('built')" > $OUT/build.txt 2>&1
wait; echo "built at $((SECONDS - START)) s"
timeout 330 python3 -m pytest -q tests -p no:cacheprovider > $OUT/suite.txt 2>&1
tail -4 $OUT/suite.txt; echo "suite done at $((SECONDS - START)) s"
timeout $((590 - (SECONDS - START))) python3 benchmarks/prototypes/pdl_ab_s21.py prev=.scratch/s29/prev.py now=instance_norm.py \
  --rounds 3 --cases fwd,bwd --dtypes float32,bfloat16 --shapes 112x64x512x512 > $OUT/ab_main.txt 2>&1
grep -v "^loaded" $OUT/ab_main.txt | cut -c1-140; echo "done at $((SECONDS - START)) s"
