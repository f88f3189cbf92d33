"""One forward (or backward) call of a forced plan, for Nsight Compute (development tool).

    ncu --section SpeedOfLight --section WarpStateStats -k regex:stream python benchmarks/profile_one.py \\
        --shape 112x64x512x512 --plan stream,8,512,16,3 [--dtype bfloat16] [--backward] [--act 2]

A plan is written in the field order of instance_norm.Plan: regime,vectors,threads,cluster,stages;
--plan auto runs the plan the library chooses for the shape (forward or backward).
"""

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import instance_norm  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("--shape", default="112x64x512x512")
parser.add_argument("--plan", default="stream,8,512,16,3")
parser.add_argument("--dtype", default="float32")
parser.add_argument("--backward", action="store_true")
parser.add_argument("--act", type=int, default=0, help="epilogue activation code (instance_norm.ACTIVATIONS)")
parser.add_argument("--slope", type=float, default=0.01)
args = parser.parse_args()
shape = tuple(int(v) for v in args.shape.split("x"))
x = torch.randn(shape, device="cuda", dtype=getattr(torch, args.dtype))
if args.plan == "auto":
    plan, backward_plan = instance_norm.chosen_plan(x), instance_norm.chosen_plan(x, backward=True)
else:
    regime, *numbers = args.plan.split(",")
    plan = backward_plan = instance_norm.Plan(regime, *(int(v) for v in numbers))
print("plan", plan, "backward plan", backward_plan)
y, stats = instance_norm.forward_with_plan(x, None, None, 1e-5, plan, act=args.act, slope=args.slope)
if args.backward:
    instance_norm.backward_with_plan(torch.randn_like(x), x, None, None, stats, backward_plan, act=args.act,
                                     slope=args.slope)
torch.cuda.synchronize()
