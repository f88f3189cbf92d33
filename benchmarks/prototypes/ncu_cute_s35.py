"""Thirty-first session: ncu of ours against quack's CuTe-DSL LayerNorm where it led in call 3 (fp32
(64,256,7,7) and (32,3,224,224), bf16 (32,3,224,224)). Profiled range: one call of each, after a warm call.
    ncu --profile-from-start off --section SpeedOfLight --section LaunchStats --section Occupancy \
        --section WarpStateStats python3 benchmarks/prototypes/ncu_cute_s35.py"""
import sys

import torch
from quack.rmsnorm import layernorm_fwd

sys.path.insert(0, ".")
import instance_norm  # noqa: E402

for dtype, shape in [(torch.float32, (64, 256, 7, 7)), (torch.float32, (32, 3, 224, 224)), (torch.bfloat16, (32, 3, 224, 224))]:
    x = torch.randn(shape, device="cuda", dtype=dtype)
    rows = x.view(shape[0] * shape[1], -1)
    w = torch.ones(rows.shape[1], device="cuda")
    m = instance_norm.ModelNew(shape[1]).cuda()
    with torch.no_grad():
        m(x), layernorm_fwd(rows, w, None, 1e-5)
        torch.cuda.synchronize()
        print(dtype, shape, "plan", instance_norm.chosen_plan(x), flush=True)
        torch.cuda.cudart().cudaProfilerStart()
        m(x)
        layernorm_fwd(rows, w, None, 1e-5)
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStop()
