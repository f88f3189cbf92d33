"""The kernels of one training step (forward + backward through autograd) and their device times (development tool).

Issue 13: at tiny instances the training step costs far more than its two norm kernels (fp32 (1024,256,4,4): 44.8 us
in CUDA-graph replay against a forward op of 6.8 and a backward op of 14.0, H200, s41). This lists what the rest is:
every kernel one step launches (torch.profiler over eager steps, so device durations, not gaps), their sum, and the
step's CUDA-graph replay time, whose difference from the sum is the gaps between kernels inside the graph.

    python benchmarks/step_kernels.py [--shapes 1024x256x4x4,64x256x7x7] [--dtype float32] [--module ours|torch] [--steps 20]
"""

import argparse
import collections
import os
import sys

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import instance_norm  # noqa: E402
from tune import graph_ms  # noqa: E402  (run as a script, benchmarks/ is on sys.path)

parser = argparse.ArgumentParser()
parser.add_argument("--shapes", default="1024x256x4x4,64x256x7x7,1024x256x7x7")
parser.add_argument("--dtype", default="float32")
parser.add_argument("--module", default="ours", choices=("ours", "torch"))
parser.add_argument("--steps", type=int, default=20)
args = parser.parse_args()
dtype = getattr(torch, args.dtype)


for text in args.shapes.split(","):
    shape = tuple(int(v) for v in text.split("x"))
    cls = instance_norm.ModelNew if args.module == "ours" else torch.nn.InstanceNorm2d
    norm = cls(shape[1], affine=True).cuda().to(dtype)
    x = torch.randn(shape, device="cuda", dtype=dtype).requires_grad_()
    dy = torch.randn(shape, device="cuda", dtype=dtype)

    def step():
        torch.autograd.backward(norm(x), dy)

    for _ in range(5):
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(args.steps):
            step()
        torch.cuda.synchronize()
    times = collections.defaultdict(list)
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            times[event.name].append(event.time_range.elapsed_us())
    graph = graph_ms(step, calls=50) * 1000  # us a step, 50 steps a graph as pdl_ab_s21.py's figures
    total = 0.0
    print(f"{args.module} {args.dtype} {text}: graph replay {graph:.2f} us a step")
    for name, ts in sorted(times.items(), key=lambda kv: -sum(kv[1])):
        per_step = sum(ts) / args.steps
        total += per_step
        print(f"  {per_step:8.2f} us  x{len(ts) / args.steps:g}  {name[:110]}")
    print(f"  {total:8.2f} us  kernels' sum (eager, device time); graph replay - sum = {graph - total:.2f} us")
