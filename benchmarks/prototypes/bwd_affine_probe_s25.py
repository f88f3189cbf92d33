"""Twentieth session's open question (benchmarks/NOTES.md, call 5): in float32 the backward alone
(tune.py: backward_with_plan back to back) ran faster on the plain stream plan (K = 8) than on the
run-ahead one (K = 4), but the module's training step (forward + autograd backward, affine) ran slower.
This probe builds the training step up piece by piece, for each plan, in CUDA-graph replay (L2 warm):
  bwd      backward_with_plan(dy, x, w, b, stats, plan)            (what tune.py times)
  fwd+bwd  ops.forward(x, w, b) then backward_with_plan             (the forward's data in L2 first)
  +acc     and x.grad's accumulation (grad.add_(dx)), as autograd does from the second step on
  module   the real training step, default plan only (torch.autograd.backward(norm(xg), dy))
and lists the module step's kernels under torch.profiler (device time per kernel).
    PYTHONPATH=. python benchmarks/prototypes/bwd_affine_probe_s25.py [--shapes 32x3x224x224,...] [--dtypes float32]
"""
import re
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import instance_norm  # noqa: E402
from tune import graph_ms  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--shapes", default="32x3x224x224,1x64x256x256,2x32x160x160")
ap.add_argument("--dtypes", default="float32")
ap.add_argument("--plans", default="stream(CS=8,S=4,K=4),stream(CS=4,S=2),stream(CS=8,S=3,K=4),stream(CS=4,S=1),"
                "stream(CS=8,S=2),stream(CS=4,S=4,K=4),stream(CS=2,S=2)")
a = ap.parse_args()
ops = instance_norm.load_extension()
print(f"# {torch.cuda.get_device_name()} torch {torch.__version__}; graph replay, us per step", flush=True)
for dtype_name in a.dtypes.split(","):
    dtype = getattr(torch, dtype_name)
    for text in a.shapes.split(","):
        shape = tuple(int(v) for v in text.split("x"))
        x = torch.randn(shape, device="cuda", dtype=dtype) * 2 + 3
        dy = torch.randn_like(x)
        w = torch.randn(shape[1], device="cuda")
        b = torch.randn(shape[1], device="cuda")
        out = torch.empty_like(x)
        grad = torch.zeros_like(x)
        copy = graph_ms(lambda: out.copy_(x)) * 1e3
        add = graph_ms(lambda: torch.add(x, dy, out=out)) * 1e3
        _, stats = ops.forward(x, w, b, 1e-5)
        default = instance_norm.chosen_plan(x, True)
        print(f"\n{dtype_name} {shape} default backward {default}; copy {copy:.2f} add {add:.2f}", flush=True)
        # The plans are built from their names (in the twenty-first session's run, matching them against
        # str() of candidate_plans found none, and the loop skipped every plan silently).
        for name in re.findall(r"stream\([^)]*\)", a.plans):  # commas inside the names too
            fields = dict(kv.split("=") for kv in name[len("stream("):-1].split(","))
            plan = instance_norm.Plan.stream(int(fields["CS"]), int(fields["S"]), int(fields.get("K", 8)))
            refusal = instance_norm.plan_refusal(x, plan, True)
            if refusal:
                print(f"  {name:24s} refused: {refusal}", flush=True)
                continue

            def bwd(plan=plan):
                return instance_norm.backward_with_plan(dy, x, w, b, stats, plan)

            def fwd_bwd(plan=plan):
                _, s = ops.forward(x, w, b, 1e-5)
                return instance_norm.backward_with_plan(dy, x, w, b, s, plan)

            def fwd_bwd_acc(plan=plan):
                dx = fwd_bwd(plan)[0]
                grad.add_(dx)

            t = [graph_ms(f) * 1e3 for f in (bwd, fwd_bwd, fwd_bwd_acc)]
            mark = " (default)" if str(plan) == str(default) else ""
            print(f"  {name:24s} bwd {t[0]:7.2f}  fwd+bwd {t[1]:7.2f}  +acc {t[2]:7.2f}{mark}", flush=True)
        norm = instance_norm.ModelNew(shape[1], affine=True).cuda()
        xg = x.detach().clone().requires_grad_()

        def step():
            torch.autograd.backward(norm(xg), dy)

        print(f"  module training step {graph_ms(step) * 1e3:7.2f} (default plans)", flush=True)
        step()
        torch.cuda.synchronize()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            for _ in range(20):
                step()
            torch.cuda.synchronize()
        for ev in prof.key_averages():
            if ev.device_type == torch.autograd.DeviceType.CUDA and ev.count:
                print(f"    {ev.count:3d} x {ev.device_time / 1:8.2f} us  {ev.key[:110]}")
        del x, dy, out, grad, xg
        torch.cuda.empty_cache()
