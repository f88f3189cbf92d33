"""Small shapes through every kernel regime, forward and backward, for compute-sanitizer (dev tool).

    compute-sanitizer --tool memcheck python benchmarks/sanitize.py
    compute-sanitizer --tool racecheck python benchmarks/sanitize.py
    compute-sanitizer --tool synccheck python benchmarks/sanitize.py
"""

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import instance_norm  # noqa: E402

ops = instance_norm.load_extension()
cluster_ok = torch.cuda.get_device_capability()[0] >= 9
# (shape, forward plan, backward plan): a warp per instance, a CTA per instance, a cluster, the
# stream kernel (more instances than resident clusters, so the stage ring wraps), multi_cta;
# odd sizes included. A plan is (vectors_per_thread, threads_per_instance, cluster_size[, stages]).
cases = [
    ((3, 5, 7, 9), (2, 32, 1), (2, 32, 1)),
    ((2, 3, 33, 31), (8, 128, 1), (8, 128, 1)),
    ((1, 2, 63, 65), (8, 128, 8), (8, 128, 8)),
    ((2, 5, 64, 64), (8, 512, 2, 3), (8, 512, 2, 2)),
    ((1, 40, 64, 64), (8, 512, 16, 2), (8, 512, 16, 1)),
    ((1, 2, 67, 301), (0, 0, 0), (0, 0, 0)),
]
for dtype in (torch.float32, torch.bfloat16):
    for shape, forward_plan, backward_plan in cases:
        if forward_plan[2] > 1 and not cluster_ok:
            continue
        x = torch.randn(shape, device="cuda", dtype=dtype)
        w = torch.randn(shape[1], device="cuda")
        y, stats = ops.forward_with_plan(x, w, w, 1e-5, *forward_plan)
        dx, sums = ops.backward_with_plan(torch.randn_like(x), x, w, stats, *backward_plan)
        y2, _ = ops.forward(x, None, None, 1e-5)
x = torch.randn(2, 3, 129, 127, device="cuda", dtype=torch.float64)  # float64: multi_cta only
y, stats = ops.forward(x, None, None, 1e-5)
dx, sums = ops.backward(torch.randn_like(x), x, None, stats)
torch.cuda.synchronize()
print("sanitize: all regimes ran")
