#!/usr/bin/env bash
# Prepared in the eighteenth session for the next one's first device call (run with `run`, no carry):
#   bash benchmarks/prototypes/next_s23.sh
# 1. The few-instance heuristic: tune.py over shapes of 1-32 instances, fp32/bf16/fp16, in do_bench
#    and in graph replay (benchmarks/NOTES.md, eighteenth session, call 5's table).
# 2. The host cost of a bare launch in this process: torch.cuda._sleep(0) back to back (a <<<>>> launch
#    through PyTorch's dispatcher), against the module call, for issue 13's 5.4 us launch stage.
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 INSTANCE_NORM_REQUIRE_GPU=1 TORCH_EXTENSIONS_DIR=/tmp/ext
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv; git log --oneline -1; md5sum instance_norm.py; } > $OUT/device.txt 2>&1
END=$((SECONDS + 560))  # the per-call limit is 600 s
timeout 240 python3 -c "import time; t=time.time(); import instance_norm; instance_norm.load_extension(); print(f'built {time.time()-t:.1f} s')" > $OUT/build.txt 2>&1 || { echo "build failed" >> $OUT/build.txt; exit 1; }
timeout 60 python3 - > $OUT/launch_cost.txt 2>&1 <<'PY'
import time, torch, instance_norm as inm
inm.load_extension()
x = torch.randn(64, 256, 7, 7, device="cuda"); m = inm.ModelNew(256).cuda()
def per_call(f, n=2000):
    for _ in range(200): f()
    best = 1e9
    for _ in range(5):
        torch.cuda.synchronize(); t = time.perf_counter()
        for _ in range(n): f()
        best = min(best, (time.perf_counter() - t) / n * 1e6); torch.cuda.synchronize()
    return best
with torch.no_grad():
    print(f"torch.cuda._sleep(0): {per_call(lambda: torch.cuda._sleep(0)):.2f} us a call")
    print(f"torch.empty_like(x): {per_call(lambda: torch.empty_like(x)):.2f} us a call")
    print(f"x.add_(0): {per_call(lambda: x.add_(0)):.2f} us a call")
    print(f"ModelNew(256) no grad, fp32 (64,256,7,7): {per_call(lambda: m(x)):.2f} us a call")
PY
FEW=1x16x64x64,1x4x256x256,1x3x224x224,1x8x128x128,2x8x96x96,3x5x127x129,1x32x64x64,4x4x128x128,2x16x48x48,1x1x512x512,8x2x128x128,1x12x100x100
timeout $(( (END - SECONDS) / 2 )) python3 benchmarks/tune.py --shapes $FEW --dtypes float32,bfloat16,float16 --top 4 > $OUT/tune_few.txt 2>&1; echo "rc=$?" >> $OUT/tune_few.txt
timeout $(( END - SECONDS )) python3 benchmarks/tune.py --shapes $FEW --dtypes float32,bfloat16,float16 --top 4 --graph > $OUT/tune_few_graph.txt 2>&1; echo "rc=$?" >> $OUT/tune_few_graph.txt
tail -40 $OUT/tune_few.txt | cut -c1-200; cat $OUT/launch_cost.txt
