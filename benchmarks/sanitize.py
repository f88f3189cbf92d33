"""Small shapes through every kernel regime, forward and backward, for compute-sanitizer (dev tool).

    compute-sanitizer --tool memcheck  python benchmarks/sanitize.py
    compute-sanitizer --tool racecheck python benchmarks/sanitize.py
    compute-sanitizer --tool synccheck python benchmarks/sanitize.py
    compute-sanitizer --tool memcheck  python benchmarks/sanitize.py --layouts   # channels-last only
    compute-sanitizer --tool memcheck  python benchmarks/sanitize.py --flat      # the flat plan only

Each shape runs the first and the last plan of every regime the host lists for it
(instance_norm.candidate_plans, tight), so the sanitizers see every regime the plan space has: a warp per instance, a CTA per instance, clusters,
the stream kernel (with more instances than resident clusters, so the stage ring wraps), multi_cta,
and eval mode's running-statistics sweeps; odd sizes included; each with and without an epilogue.
Then the same for channels-last input (the cl_onchip and cl_split plans: 16-byte vectors along C,
one element per access for odd C, and an input that is not 16-byte aligned), 2-D and 3-D;
--layouts runs only those.
"""

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import instance_norm  # noqa: E402

ops = instance_norm.load_extension()
SHAPES = [(3, 5, 7, 9), (2, 3, 33, 31), (1, 2, 63, 65), (2, 5, 64, 64), (1, 40, 64, 64), (1, 2, 67, 301)]


def per_regime(plans):
    """The first and the last plan of each regime and K (e.g. the smallest and the largest cluster;
    the stream family's run-ahead K=8 / K=4 kernels and the forward's wide K=16 ones are different
    code, so each K keeps its own pair)."""
    chosen = {}
    for plan in plans:
        key = (plan.regime, plan.vectors) if plan.regime == "stream" else plan.regime
        chosen.setdefault(key, []).append(plan)
    return [p for group in chosen.values() for p in dict.fromkeys((group[0], group[-1]))]


# The flat plan: many tiny instances per CTA starting anywhere in a vector, a partial last CTA, and
# the largest instance it holds; the register rows at accesses of 1 (7x7), 2 (5x6) and 4 (3x4, 8x8) elements.
FLAT_SHAPES = [(3, 37, 7, 7), (2, 50, 1, 3), (5, 29, 8, 8), (4, 23, 5, 6), (7, 13, 3, 4), (2, 3, 33, 31), (1, 3, 64, 64)]
CL_SHAPES = [(3, 8, 7, 9), (2, 5, 33, 31), (2, 64, 7, 7), (1, 16, 67, 301), (2, 8, 5, 6, 7)]


def channels_last(t, misaligned=False):
    """t in channels-last memory (any rank), optionally one element past a 16-byte boundary."""
    perm = [0] + list(range(2, t.dim())) + [1]
    if not misaligned:
        return t.permute(perm).contiguous().permute([perm.index(i) for i in range(t.dim())])
    flat = torch.empty(t.numel() + 1, device=t.device, dtype=t.dtype)
    body = flat[1:].view([t.shape[i] for i in perm])
    body.copy_(t.permute(perm))
    return body.permute([perm.index(i) for i in range(t.dim())])


only_layouts = "--layouts" in sys.argv[1:]
only_flat = "--flat" in sys.argv[1:]
cases = [] if only_layouts or only_flat else [(dtype, shape, False) for dtype in (torch.float32, torch.bfloat16) for shape in SHAPES]
if only_flat:
    cases = [(dtype, shape, False) for dtype in (torch.float32, torch.bfloat16) for shape in FLAT_SHAPES]
    per_regime_all = per_regime
    per_regime = lambda plans: [p for p in per_regime_all(plans) if p.regime == "flat"]  # noqa: E731
else:
    cases += [(dtype, shape, True) for dtype in (torch.float32, torch.bfloat16) for shape in CL_SHAPES]
runs = 0
for index, (dtype, shape, cl) in enumerate(cases):
    x = torch.randn(shape, device="cuda", dtype=dtype)
    if cl:
        x = channels_last(x, misaligned=index % 3 == 2)
    w = torch.randn(shape[1], device="cuda")
    dy = torch.randn_like(x)
    r = torch.randn_like(x)
    if cl:
        dy, r = channels_last(dy), channels_last(r)
    for plan in per_regime(instance_norm.candidate_plans(x, tight=True)):
        instance_norm.forward_with_plan(x, w, w, 1e-5, plan)
        instance_norm.forward_with_plan(x, w, w, 1e-5, plan, r, 3, 0.0)  # epilogue kernels: silu + residual
        runs += 2
    _, stats = ops.forward(x, w, w, 1e-5)
    for plan in per_regime(instance_norm.candidate_plans(x, backward=True, tight=True)):
        instance_norm.backward_with_plan(dy, x, w, w, stats, plan)
        instance_norm.backward_with_plan(dy, x, w, w, stats, plan, 4, 0.0)  # gelu's backward
        runs += 2
    rm, rv = torch.randn(shape[1], device="cuda"), torch.rand(shape[1], device="cuda") + 0.5
    ops.eval_forward(x, rm, rv, w, w, 1e-5)
    ops.eval_forward(x, rm, rv, w, w, 1e-5, r, 2, 0.2)
    ops.eval_backward(dy, x, rm, rv, w, w, 1e-5)
    ops.eval_backward(dy, x, rm, rv, w, w, 1e-5, 2, 0.2)
    ops.update_running_stats(stats, rm, rv, shape[0], x[0, 0].numel(), 0.1, 1e-5)
x = torch.randn(2, 3, 129, 127, device="cuda", dtype=torch.float64)  # float64: multi_cta only
y, stats = ops.forward(x, None, None, 1e-5)
ops.backward(torch.randn_like(x), x, None, None, stats)
y, stats = ops.fused_forward(x, None, None, x, 1e-5, 5, 0.0)
ops.backward(torch.randn_like(x), x, None, None, stats, 5, 0.0)
x = channels_last(torch.randn(2, 6, 33, 31, device="cuda", dtype=torch.float64))  # float64 channels-last: cl_split
y, stats = ops.fused_forward(x, None, None, x, 1e-5, 5, 0.0)
ops.backward(channels_last(torch.randn_like(x)), x, None, None, stats, 5, 0.0)
torch.cuda.synchronize()
print(f"sanitize: {runs} plan runs, every regime, forward and backward")
