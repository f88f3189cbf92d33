"""One forward (or backward) call of a forced plan, for Nsight Compute (development tool).

    ncu --section SpeedOfLight --section WarpStateStats -k regex:stream python benchmarks/profile_one.py \\
        --shape 112x64x512x512 --plan 8,512,16,3 [--dtype bfloat16] [--backward]
"""

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import instance_norm  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("--shape", default="112x64x512x512")
parser.add_argument("--plan", default="8,512,16,3")
parser.add_argument("--dtype", default="float32")
parser.add_argument("--backward", action="store_true")
args = parser.parse_args()
ops = instance_norm.load_extension()
shape = tuple(int(v) for v in args.shape.split("x"))
plan = tuple(int(v) for v in args.plan.split(","))
x = torch.randn(shape, device="cuda", dtype=getattr(torch, args.dtype))
y, stats = ops.forward_with_plan(x, None, None, 1e-5, *plan)
if args.backward:
    ops.backward_with_plan(torch.randn_like(x), x, None, stats, *plan)
torch.cuda.synchronize()
