"""Small shapes through every kernel regime, forward and backward, for compute-sanitizer (dev tool).

    compute-sanitizer --tool memcheck python benchmarks/sanitize.py
    compute-sanitizer --tool racecheck python benchmarks/sanitize.py
"""

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import instance_norm  # noqa: E402

ops = instance_norm.load_extension()
cluster_ok = torch.cuda.get_device_capability()[0] >= 9
# (shape, plan): a warp per instance, a CTA per instance, a cluster, multi_cta; odd sizes included
cases = [
    ((3, 5, 7, 9), (2, 32, 1)),
    ((2, 3, 33, 31), (8, 128, 1)),
    ((1, 2, 63, 65), (8, 128, 8)),
    ((1, 2, 67, 301), (0, 0, 0)),
]
for dtype in (torch.float32, torch.bfloat16):
    for shape, (k, g, cs) in cases:
        if cs > 1 and not cluster_ok:
            continue
        x = torch.randn(shape, device="cuda", dtype=dtype)
        w = torch.randn(shape[1], device="cuda")
        y, stats = ops.forward_with_plan(x, w, w, 1e-5, k, g, cs)
        dx, sums = ops.backward_with_plan(torch.randn_like(x), x, w, stats, k, g, cs)
        y2, _ = ops.forward(x, None, None, 1e-5)
torch.cuda.synchronize()
print("sanitize: all regimes ran")
