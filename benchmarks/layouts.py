#!/usr/bin/env python3
"""Layouts and ranks (issue 11): channels_last 2-D, and 3-D in both layouts, against PyTorch.

    python benchmarks/layouts.py [--quick] [--backward] [--dtypes float32,bfloat16] [--out DIR] [--seed S]
    python benchmarks/bench.py --layouts [the same arguments]

Per case (shapes below; the 2-D sweep of shapes.py in channels_last, and InstanceNorm3d's
(2, 32, 128, 128, 128) in contiguous and channels_last_3d memory):
1. Correctness first: fresh random input (randn * scale + offset, from --seed, printed); ours against
   float64 (relative L2 and max abs); the output's memory format (ours keeps a channels-last input's
   layout when C fills 16-byte vectors, else returns NCHW).
2. Device time per call, triton do_bench median with the L2 flushed: ours (ModelNew for 2-D,
   instance_norm.InstanceNorm3d for 3-D, no grad), eager nn.InstanceNorm{2,3}d, torch.compile of it
   (default mode, dynamic=False), F.group_norm(x, C), and the floor: a device copy of the same bytes
   (torch.empty_like(x) keeps x's layout; .copy_(x)).
3. --backward: x -> dx through autograd (affine=False) for ours, eager, compile; floor
   torch.add(x, dy, out=dx), all in x's layout (dy made in x's layout).
Output: layouts.json and layouts.md in --out (default benchmarks/results).
"""

import argparse
import datetime
import functools
import json
import os
import random
import statistics
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(HERE)]
import instance_norm  # noqa: E402
from shapes import SWEEP, parse_dtypes  # noqa: E402

SHAPES_3D = [(2, 32, 128, 128, 128)]
TOL = {"float32": 1e-5, "float16": 2e-3, "bfloat16": 1.6e-2}


def log(*parts):
    print(*parts, flush=True)


def fmt(v, spec=".4g"):
    return "-" if v is None else format(v, spec)


def ours_module(rank, c):
    if rank == 2:
        return instance_norm.ModelNew(c)
    cls = getattr(instance_norm, f"InstanceNorm{rank}d", None)
    return cls(c) if cls is not None else None


def torch_module(rank, c):
    return {1: nn.InstanceNorm1d, 2: nn.InstanceNorm2d, 3: nn.InstanceNorm3d}[rank](c)


def memory_format(rank, layout):
    if layout == "contiguous":
        return torch.contiguous_format
    return torch.channels_last if rank == 2 else torch.channels_last_3d


def make_input(shape, dtype, layout, rng):
    scale, offset = 2 ** rng.uniform(-2, 2), rng.uniform(-3, 3)
    x = torch.randn(shape, device="cuda", dtype=torch.float32) * scale + offset
    return x.to(dtype).contiguous(memory_format=memory_format(len(shape) - 2, layout))


def reference(x):
    dims = tuple(range(2, x.dim()))
    xd = x.double()
    mean = xd.mean(dim=dims, keepdim=True)
    var = (xd - mean).square().mean(dim=dims, keepdim=True)
    return (xd - mean) * (var + 1e-5).rsqrt()


def check(x, module):
    with torch.no_grad():
        y = module(x)
    ref = reference(x)
    err = (y.double() - ref).norm() / ref.norm().clamp_min(1e-30)
    # The promised layout: x's channels-last layout when C fills 16-byte vectors, NCHW otherwise.
    keeps = not x.is_contiguous() and x.size(1) * x.element_size() % 16 == 0
    as_promised = y.is_contiguous(memory_format=memory_format(x.dim() - 2, "cl")) if keeps else y.is_contiguous()
    return float(err), float((y.double() - ref).abs().max()), bool(as_promised)


def timed(fn):
    from triton.testing import do_bench

    return do_bench(fn, warmup=25, rep=100, return_mode="median")


def time_all(makers):
    """{name: ms} for every maker (None where there is nothing to time), each built, run once (to
    compile) and timed after a dynamo reset."""
    times = {}
    for name, make in makers.items():
        if make is None:
            times[name] = None
            continue
        torch._dynamo.reset()
        fn = make()
        fn()
        times[name] = timed(fn)
    return times


def case(shape, dtype, layout, args, rng):
    rank, c = len(shape) - 2, shape[1]
    x = make_input(shape, getattr(torch, dtype), layout, rng)
    row = {"shape": list(shape), "dtype": dtype, "layout": layout, "bytes": x.numel() * x.element_size()}
    ours = ours_module(rank, c)
    if ours is not None:
        ours = ours.cuda()
        row["rel_l2"], row["max_abs"], row["format_kept"] = check(x, ours)
        row["ok"] = row["rel_l2"] <= TOL[dtype]
    makers = {"ours": (lambda: functools.partial(ours, x)) if ours is not None else None,
              "eager": lambda: functools.partial(torch_module(rank, c).cuda(), x),
              "compile": lambda: functools.partial(torch.compile(torch_module(rank, c).cuda(), dynamic=False), x),
              "group_norm": lambda: functools.partial(F.group_norm, x, c),
              "copy": lambda: functools.partial(torch.empty_like(x).copy_, x)}
    with torch.no_grad():
        fwd = time_all(makers)
    row["forward"] = fwd
    if args.backward:
        dy = torch.randn_like(x)  # randn_like keeps x's layout

        def grad_of(module):
            xg = x.detach().requires_grad_()
            return functools.partial(torch.autograd.grad, module.cuda()(xg), xg, dy, retain_graph=True)

        bmakers = {"ours": (lambda: grad_of(ours)) if ours is not None else None,
                   "eager": lambda: grad_of(torch_module(rank, c)),
                   "compile": lambda: grad_of(torch.compile(torch_module(rank, c), dynamic=False)),
                   "floor": lambda: functools.partial(torch.add, x, dy, out=torch.empty_like(x))}
        row["backward"] = time_all(bmakers)
    log(f"{dtype:9} {layout:10} {str(tuple(shape)):24} " + " ".join(f"{k} {fmt(v)}" for k, v in fwd.items())
        + (f" | err {row.get('rel_l2', 0):.2e} layout as promised {row.get('format_kept')}" if ours is not None else ""))
    return row


def table(rows, kind, names, floor):
    head = ["dtype", "layout", "shape"] + [f"{n} ms" for n in names] + [f"ours/{floor}", "vs best peer"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * 3 + "---:|" * (len(head) - 3)]
    for r in rows:
        t = r.get(kind)
        if not t:
            continue
        best = min((t[p] for p in ("eager", "compile", "group_norm") if t.get(p)), default=None)
        ours = t.get("ours")
        lines.append("| " + " | ".join([r["dtype"], r["layout"], "x".join(map(str, r["shape"]))]
                                       + [fmt(t.get(n)) for n in names]
                                       + [fmt(ours / t[floor], ".2f") + "x" if ours else "-",
                                          fmt(best / ours, ".2f") + "x" if ours and best else "-"]) + " |")
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="2-D: only the main shape and (16,64,256,256)")
    p.add_argument("--backward", action="store_true")
    p.add_argument("--dtypes", type=parse_dtypes, default=parse_dtypes("float32,bfloat16"))
    p.add_argument("--out", default=os.path.join(HERE, "results"))
    p.add_argument("--seed", type=int)
    args = p.parse_args(argv)
    if args.seed is None:
        args.seed = random.SystemRandom().randrange(2**31)
    rng = random.Random(args.seed)
    torch.manual_seed(args.seed)
    meta = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "seed": args.seed}
    log(f"# {meta['device']} | torch {meta['torch']} | {meta['date']} | seed {args.seed}")
    shapes_2d = [(16, 64, 256, 256), (112, 64, 512, 512)] if args.quick else SWEEP
    cases = [(s, d, "cl") for d in args.dtypes for s in shapes_2d]
    cases += [(s, "float32", layout) for s in SHAPES_3D for layout in ("contiguous", "cl")]
    rows = [case(s, d, layout, args, rng) for s, d, layout in cases]
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "layouts.json"), "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=1)
    text = (f"# Layouts: {meta['device']}, torch {meta['torch']}, {meta['date']}, seed {args.seed}\n\n"
            "Device time, triton do_bench median (L2 flushed), ms per call. cl = channels_last (2-D) or\n"
            "channels_last_3d (3-D); the copy floor copies the same bytes in the same layout.\n\n"
            "## Forward (no grad)\n\n" + table(rows, "forward", ("ours", "eager", "compile", "group_norm", "copy"),
                                               "copy"))
    if args.backward:
        text += "\n\n## Backward (x -> dx, autograd)\n\n" + table(rows, "backward",
                                                                 ("ours", "eager", "compile", "floor"), "floor")
    bad = [r for r in rows if r.get("ok") is False or r.get("format_kept") is False]
    text += "\n\n## Correctness\n\n" + "\n".join(
        f"- {r['dtype']} {r['layout']} {tuple(r['shape'])}: rel L2 {fmt(r.get('rel_l2'), '.2e')}, "
        f"max abs {fmt(r.get('max_abs'), '.2e')}, output layout as promised {r.get('format_kept')}" for r in rows)
    with open(os.path.join(args.out, "layouts.md"), "w") as f:
        f.write(text + "\n")
    log("\n" + text)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
