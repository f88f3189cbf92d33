#!/usr/bin/env bash
# Prepared in the twenty-first session for the next one's first device call (benchmarks/NOTES.md,
# twenty-first session, next steps). Before it, on the local machine:
#   mkdir -p .scratch && git show 266cb93:instance_norm.py > .scratch/fwdregs.py
# then run(command="bash benchmarks/prototypes/next_s26.sh", carry=[".scratch"], timeout_s=600).
# 1. The backward's register path where it was never timed: fp32 onchip(8,128) (64x64 with many
#    instances: registers bind at 512 threads an SM against 768 before), plain and gelu training step,
#    against 266cb93 (the forward change alone). If it loses, bound the backward by K*G or cap fp32
#    Activated (NOTES, twenty-first session, code review).
# 2. bench.py's forward and backward tables below the main shape on the final code (the backward table of
#    the twenty-first session predates the backward's register path).
# The second call: next_s26b.sh (ncu of the backward against Inductor's; the fp32 affine probe).
set -uo pipefail
END=$((SECONDS + 585))
[ -f .scratch/fwdregs.py ] || { echo "missing .scratch/fwdregs.py (see the header)"; exit 1; }
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 INSTANCE_NORM_REQUIRE_GPU=1 TORCH_EXTENSIONS_DIR=/tmp/ext
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv; md5sum instance_norm.py .scratch/fwdregs.py; } > $OUT/device.txt 2>&1
python3 -c "import importlib.util; s=importlib.util.spec_from_file_location('m_old','.scratch/fwdregs.py'); m=importlib.util.module_from_spec(s); s.loader.exec_module(m); m.load_extension()" > $OUT/build_old.txt 2>&1 &
timeout 240 python3 -c "import time; t=time.time(); import instance_norm; instance_norm.load_extension(); print(f'built {time.time()-t:.1f} s')" > $OUT/build.txt 2>&1 || exit 1
wait
# The review's whole-group test cases (never run on a GPU before the twenty-second session).
timeout 120 python3 -m pytest -q -x tests/test_gpu.py tests/test_epilogue.py -k whole_group > $OUT/pytest_whole_group.txt 2>&1
echo "rc=$?" >> $OUT/pytest_whole_group.txt; tail -3 $OUT/pytest_whole_group.txt
python3 -c "
import torch, instance_norm as m
m.load_extension()
for s in [(16,256,64,64),(8,64,64,64),(4,128,128,128),(8,512,32,32)]:
    for d in (torch.float32, torch.bfloat16):
        x = torch.empty(s, device='cuda', dtype=d)
        print(s, d, 'fwd', m.chosen_plan(x), 'bwd', m.chosen_plan(x, True))
" > $OUT/plans.txt 2>&1; cat $OUT/plans.txt
timeout 200 python3 benchmarks/prototypes/pdl_ab_s21.py fwdregs=.scratch/fwdregs.py new=instance_norm.py --rounds 3 \
  --cases train,acttrain --dtypes float32,bfloat16 --shapes 16x256x64x64,8x64x64x64,4x128x128x128 > $OUT/ab_bwd64.txt 2>&1
echo "rc=$?" >> $OUT/ab_bwd64.txt; cut -c1-150 $OUT/ab_bwd64.txt
# If onchip(8,128) lost: which backward plan wins there now (e.g. onchip(4,256), 58 registers)?
timeout 60 python3 benchmarks/tune.py --graph --backward --shapes 16x256x64x64,8x64x64x64 --dtypes float32,bfloat16 --top 6 > $OUT/tune_bwd64.txt 2>&1
grep -h "default\|^float\|^bfloat" $OUT/tune_bwd64.txt | cut -c1-150 | head -30
timeout $((END - SECONDS - 10)) python3 benchmarks/bench.py --quick --backward --dtypes float32,bfloat16 \
  --shapes 64x256x7x7,3x5x127x129,32x3x224x224,8x512x32x32,4x128x128x128,1x16x64x64,16x64x256x256 --out $OUT/sweep > $OUT/bench.txt 2>&1
echo "bench rc=$?" >> $OUT/bench.txt
tar czf $OUT/sweep.tgz -C $OUT sweep && rm -rf $OUT/sweep
tail -3 $OUT/bench.txt
