"""A/B device time of two versions of instance_norm.py in one process (development tool).

    git show REV:instance_norm.py > .scratch/instance_norm_old.py      # here (the device has no .git)
    python benchmarks/ab.py --old .scratch/instance_norm_old.py [--shapes main,quick] [--dtypes float32]
        [--plans]                                                         # on the device, carry .scratch

Both files are loaded as separate modules (their op namespaces differ by source hash, so both
extensions live side by side); every shape times a copy of the same bytes, the old ModelNew, the new
one and the new InstanceNormAct2d(leaky_relu), do_bench median with the L2 flushed, interleaved in
one run. --eval also times eval mode with running statistics. --plans also times every stream candidate plan of the new file against the same plan of the
old. This is how the -split-compile slowdown (1.47x, benchmarks/NOTES.md) was found.
"""

import argparse
import importlib.util
import os
import sys
import time

import torch
import triton

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from shapes import parse_shapes  # noqa: E402


def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    start = time.time()
    spec.loader.exec_module(module)
    print(f"{name}: {path} loaded in {time.time() - start:.1f} s", flush=True)
    return module


def randomized_eval(module):
    """The module on the GPU in eval mode, its running statistics and affine parameters random."""
    module = module.cuda().eval()
    with torch.no_grad():
        module.running_mean.normal_()
        module.running_var.uniform_(0.5, 1.5)
        module.weight.normal_()
        module.bias.normal_()
    return module


def bench(fn):
    return triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median") * 1e3  # us


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--old", required=True, help="the other instance_norm.py")
    parser.add_argument("--new", default=os.path.join(ROOT, "instance_norm.py"))
    parser.add_argument("--shapes", default="main,quick")
    parser.add_argument("--dtypes", default="float32,bfloat16")
    parser.add_argument("--plans", action="store_true")
    parser.add_argument("--channels-last", action="store_true", help="channels_last (4-D) / channels_last_3d (5-D) input")
    parser.add_argument("--backward", action="store_true",
                        help="also time the backward (autograd.grad of the module's output), against the add floor")
    parser.add_argument("--eval", action="store_true",
                        help="also time eval mode with running statistics (old, new, new + leaky_relu)")
    args = parser.parse_args()
    new, old = load(args.new, "instance_norm_new"), load(args.old, "instance_norm_old")
    for shape in parse_shapes(args.shapes):
        for dtype in args.dtypes.split(","):
            x = torch.randn(shape, device="cuda", dtype=getattr(torch, dtype))
            if args.channels_last:
                x = x.contiguous(memory_format=torch.channels_last if x.dim() == 4 else torch.channels_last_3d)
            out = torch.empty_like(x)
            row = {"copy": bench(lambda: out.copy_(x))}
            with torch.no_grad():
                for name, module in (("old", old), ("new", new)):
                    norm = module.ModelNew(shape[1]).cuda()
                    row[name] = bench(lambda: norm(x))
                if hasattr(new, "InstanceNormAct2d"):
                    fused = new.InstanceNormAct2d(shape[1], activation="leaky_relu").cuda()
                    row["new_leaky"] = bench(lambda: fused(x))
            cells = " ".join(f"{k}={v:.1f}us" for k, v in row.items())
            print(f"{dtype} {tuple(shape)} {new.chosen_plan(x)}: {cells} new/old={row['new'] / row['old']:.3f} "
                  f"new/copy={row['new'] / row['copy']:.3f}", flush=True)
            if args.backward:
                dy = torch.randn_like(x)
                row = {"add": bench(lambda: torch.add(x, dy, out=out))}
                for name, module in (("old", old), ("new", new)):
                    norm = module.ModelNew(shape[1], affine=True).cuda()
                    xg = x.detach().requires_grad_()
                    y = norm(xg)
                    row[f"bwd_{name}"] = bench(lambda: torch.autograd.grad(y, xg, dy, retain_graph=True))
                cells = " ".join(f"{k}={v:.1f}us" for k, v in row.items())
                print(f"    backward {dtype} {tuple(shape)}: {cells} new/old={row['bwd_new'] / row['bwd_old']:.3f} "
                      f"new/add={row['bwd_new'] / row['add']:.3f}", flush=True)
            if args.eval:
                row = {"copy": row["copy"]}
                with torch.no_grad():
                    for name, module in (("old", old), ("new", new)):
                        norm = randomized_eval(module.ModelNew(shape[1], affine=True, track_running_stats=True))
                        row[f"eval_{name}"] = bench(lambda: norm(x))
                    fused = randomized_eval(new.InstanceNormAct2d(shape[1], affine=True, track_running_stats=True,
                                                                  activation="leaky_relu"))
                    row["eval_new_leaky"] = bench(lambda: fused(x))
                cells = " ".join(f"{k}={v:.1f}us" for k, v in row.items())
                print(f"    eval {dtype} {tuple(shape)}: {cells} new/old={row['eval_new'] / row['eval_old']:.3f} "
                      f"new/copy={row['eval_new'] / row['copy']:.2f}", flush=True)
            if args.plans:
                for plan in new.candidate_plans(x, tight=True):
                    # A plan the old file does not have (e.g. the forward's K=16 plans) has no "old" time.
                    if plan.regime == "stream" and old.plan_refusal(x, old.Plan(*plan)) == "":
                        a = bench(lambda: new.forward_with_plan(x, None, None, 1e-5, plan))
                        b = bench(lambda: old.forward_with_plan(x, None, None, 1e-5, old.Plan(*plan)))
                        print(f"    {plan}: new {a:.0f} us, old {b:.0f} us", flush=True)


if __name__ == "__main__":
    main()
