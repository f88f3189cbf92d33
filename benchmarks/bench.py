#!/usr/bin/env python3
"""Benchmark instance_norm.ModelNew against PyTorch's InstanceNorm2d and the memory floor.

    python benchmarks/bench.py [--quick] [--backward] [--host] [--dtypes float32,bfloat16]
                               [--shapes sweep|main|quick|NxCxHxW,...] [--out DIR] [--seed S]
    python benchmarks/bench.py --fused [--quick] [--dtypes ...] [--shapes ...] [--out DIR] [--seed S]
    python benchmarks/bench.py --cute ...      # also quack's CuTe-DSL LayerNorm (benchmarks/quack_wheels.sh)
    python benchmarks/bench.py --dry-run ...   # check the arguments and list the cases, no CUDA
    python benchmarks/bench.py --layouts [--quick] [--backward] ...   # channels_last and 3-D (layouts.py)

Per shape and dtype (lists in benchmarks/shapes.py, shared with tune.py):
1. Correctness, before any timing: fresh random input every run (randn times a scale in [1/4, 4]
   plus an offset in [-3, 3], from --seed, printed); ModelNew's output (--backward: and its input
   gradient) against float64, relative L2 error and max abs error. NaN, or a relative error over
   float32 1e-5, float16 2e-3, bfloat16 1.6e-2 (backward: ten times), exits with 1 before timing.
2. Forward device time per call: ours (ModelNew, no grad), eager nn.InstanceNorm2d, torch.compile
   of it (default mode, dynamic=False, compiled afresh per shape and dtype), F.group_norm(x, C),
   and the floor out.copy_(x), a copy of the same bytes. Two methods: triton.testing.do_bench
   median, L2 flushed before every call (the main figure); CUDA-graph replay, calls captured back
   to back in one graph, events, time / calls (no launch gaps, L2 warm; '-' if not capturable).
3. --backward: x -> dx (affine=False, graph retained): ours as the raw op on saved statistics
   (ops.backward, "ours_op") and through autograd (torch.autograd.grad, "ours"), eager and
   torch.compile likewise, and the floor torch.add(x, dy, out=dx) (reads x, dy; writes dx).
4. --host: calls as a user feels them: synchronize, event, call, event, synchronize; median of 40
   (the device idles while the host prepares a call, so host time shows). Forward (no grad) of
   ours, nn.InstanceNorm2d, F.group_norm; training step m(x).backward(dy) with affine=True of ours
   and nn.InstanceNorm2d.
speedup = the best peer's time / ours; TB/s = bytes moved (forward 2x, backward 3x the tensor) /
time. Output in --out (default benchmarks/results/): check, forward, backward, host .json (device,
torch, date, rows) and .md (the tables, also printed last); bandwidth.png if matplotlib is there.

--fused, alone (issue 10; shapes: the sweep, --quick: shapes.FUSED_QUICK), do_bench median (and
CUDA-graph replay for a second table of the compiled blocks: device time without the wrapper's host
time), every ratio against floors timed in the same run: copy = out.copy_(x), add = torch.add(x, dy, out=dx).
a. Compiled block torch.compile(Sequential(norm, nn.LeakyReLU(0.01))), dynamic=False, forward
   without grad, norm = nn.InstanceNorm2d(C), ModelNew(C) with the compile fusion pass on, and off
   (set_compile_fusion(False); column dropped where instance_norm has no such function); each
   compiled once per shape and dtype after torch._dynamo.reset(), with the FX and AOTAutograd
   caches off, and its generated code searched for fused_forward calls ("fused?").
b. InstanceNormAct2d(C, activation="leaky_relu") eager: forward without grad against copy; training
   step torch.autograd.grad(m(x), (x, weight, bias), dy), affine=True, against copy + add.
Every output (train: dx) is checked against float64 like 1.; a failure is marked, and exits 1
after the tables. Output: fused.json and fused.md.
"""

import argparse
import contextlib
import datetime
import functools
import gc
import json
import math
import os
import random
import re
import statistics
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(HERE)]
import instance_norm  # noqa: E402
from shapes import DEFAULT_DTYPES, FUSED_QUICK, MAIN, QUICK, SWEEP, parse_dtypes, parse_shapes  # noqa: E402

EPS = 1e-5  # nn.InstanceNorm2d's default, and ModelNew's
FORWARD_TOL = {"float32": 1e-5, "float16": 2e-3, "bfloat16": 1.6e-2}
BACKWARD_TOL_FACTOR = 10
FORWARD = ("ours", "eager", "compile", "group_norm", "copy")
BACKWARD = ("ours_op", "ours", "eager", "compile", "floor")
PEERS = ("eager", "compile", "group_norm")
# --cute: quack's CuTe-DSL LayerNorm on the (N*C, H*W) view with weight 1 (issue 12's strongest
# memory-bound norm; quack and nvidia-cutlass-dsl travel as wheels, see benchmarks/quack_wheels.sh).
CUTE = "cute_ln"
METHODS = {"do_bench": "triton do_bench median, L2 flushed before every call",
           "graph": "CUDA-graph replay, calls back to back, L2 not flushed"}
# --fused: the compiled blocks, the eager fused module, and the floors; the activation everywhere.
FUSED = ("copy", "add", "compile_nn", "compile_ours", "compile_unfused", "fused_fwd", "fused_train")
SLOPE = 0.01
FUSED_CALL = re.compile(r"fused_forward(?:\.default)?\(")  # a call of the fused op in generated code
TARGETS = {"block_main": 0.75, "block_any": 1.0, "fused_fwd": 1.06, "fused_train": 1.12}  # issue 10


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="shapes.QUICK (--fused: FUSED_QUICK) and shorter timing")
    p.add_argument("--backward", action="store_true", help="also time the backward pass")
    p.add_argument("--host", action="store_true", help="also the host-side table (isolated eager calls)")
    p.add_argument("--fused", action="store_true",
                   help="instead: issue 10's fused norm + activation tables (see above); shapes default "
                        "to the sweep, with --quick to shapes.FUSED_QUICK")
    p.add_argument("--dtypes", type=parse_dtypes, default=parse_dtypes(DEFAULT_DTYPES),
                   help=f"comma list of float32, bfloat16, float16 (default {DEFAULT_DTYPES})")
    p.add_argument("--shapes", type=parse_shapes,
                   help="sweep (default), main, quick, fused_quick or NxCxHxW; comma list")
    p.add_argument("--out", default=os.path.join(HERE, "results"), help="output folder (default benchmarks/results)")
    p.add_argument("--seed", type=int, help="input seed (default: a fresh one, printed)")
    p.add_argument("--cute", action="store_true",
                   help="also the forward peer cute_ln: quack's CuTe-DSL LayerNorm on the (N*C, H*W) view "
                        "(needs quack-kernels and nvidia-cutlass-dsl; counts among the peers)")
    p.add_argument("--dry-run", action="store_true", help="check the arguments and list the cases; no CUDA")
    args = p.parse_args(argv)
    if args.fused and (args.backward or args.host or args.cute):
        p.error("--fused runs alone: drop --backward, --host and --cute")
    args.shapes = args.shapes or ((FUSED_QUICK if args.fused else QUICK) if args.quick else SWEEP)
    if args.seed is None:
        args.seed = random.SystemRandom().randrange(1 << 31)
    return args


def log(*parts):
    print(*parts, flush=True)


def free():
    gc.collect()
    torch.cuda.empty_cache()


def first_line(error):
    return f"{type(error).__name__}: {(str(error).strip().splitlines() or [''])[0][:100]}"


def shape_str(shape):
    return "(" + ",".join(map(str, shape)) + ")"


def fmt(v, spec=".4g", suffix=""):
    """'-' for a missing number: a peer that failed, or NaN/inf in the check table."""
    return "-" if v is None else format(v, spec) + suffix


def make_input(shape, dtype, rng):
    x = torch.randn(shape, device="cuda", dtype=dtype)
    return x.mul_(math.exp(rng.uniform(-math.log(4), math.log(4)))).add_(rng.uniform(-3, 3))


def reference_errors(x, out, dy=None, slope=None):
    """(relative L2, max abs) error of out against instance norm of x in float64, or with dy against
    its input gradient (affine=False, or weight 1 and bias 0); slope: the norm followed by leaky_relu
    with that slope. Chunked over N to bound the float64 temporaries."""
    step = max(1, (1 << 26) // x[0].numel())
    num = den = worst = 0.0
    for i in range(0, x.shape[0], step):
        xs = x[i : i + step].double().flatten(2)
        xs -= xs.mean(-1, keepdim=True)
        rstd = (xs.square().mean(-1, keepdim=True) + EPS).rsqrt()
        ref = xs.mul_(rstd)
        if dy is not None:
            g = dy[i : i + step].double().flatten(2)
            if slope is not None:
                g = torch.where(ref > 0, g, g * slope)
            ref = (g - g.mean(-1, keepdim=True) - ref * (g * ref).mean(-1, keepdim=True)) * rstd
        elif slope is not None:
            ref = F.leaky_relu(ref, slope)
        diff = out[i : i + step].double().flatten(2) - ref
        num, den = num + diff.square().sum().item(), den + ref.square().sum().item()
        worst = max(worst, diff.abs().nan_to_num(math.inf).max().item())
    return (math.sqrt(num / den) if den else math.sqrt(num)), worst  # NaN in out: NaN


def kink_safe(x, dy, margin=1e-4):
    """dy with zeros where the float64 normalized x lies within `margin` of leaky_relu's kink: there
    a last-bit difference in the pre-activation legitimately flips the gradient between the slopes,
    which is not an error of the kernel (the tests do the same)."""
    step = max(1, (1 << 26) // x[0].numel())
    for i in range(0, x.shape[0], step):
        xs = x[i : i + step].double().flatten(2)
        xs -= xs.mean(-1, keepdim=True)
        z = xs * (xs.square().mean(-1, keepdim=True) + EPS).rsqrt()
        dy[i : i + step].flatten(2).masked_fill_(z.abs() < margin, 0)
    return dy


def tolerance(dtype, backward=False):
    return FORWARD_TOL[dtype] * (BACKWARD_TOL_FACTOR if backward else 1)


def error_entry(rel, worst, tol):
    return {"tol": tol, "ok": rel <= tol,  # NaN fails
            "rel_l2": rel if math.isfinite(rel) else None,  # JSON has no NaN or inf
            "max_abs": worst if math.isfinite(worst) else None}


def error_text(rel, worst, entry):
    return f"rel L2 {rel:.2e} max abs {worst:.2e} " + ("ok" if entry["ok"] else f"FAIL (tol {entry['tol']:.1e})")


def check(cases, backward, rng):
    rows = []
    for dtype, shape in cases:
        x = make_input(shape, getattr(torch, dtype), rng)
        model = instance_norm.ModelNew(shape[1]).cuda()
        with torch.no_grad():
            errors = {"forward": reference_errors(x, model(x))}
        if backward:
            xg, dy = x.detach().requires_grad_(), torch.randn_like(x)
            (dx,) = torch.autograd.grad(model(xg), xg, dy)
            errors["backward"] = reference_errors(x, dx, dy)
            del xg, dy, dx
        for direction, (rel, worst) in errors.items():
            entry = error_entry(rel, worst, tolerance(dtype, direction == "backward"))
            rows.append({"dtype": dtype, "shape": list(shape), "direction": direction, **entry})
            log(f"  check {dtype:8} {shape_str(shape):18} {direction:8} {error_text(rel, worst, entry)}")
        del x, model
        free()
    return rows


def check_table(rows):
    head = ["dtype", "shape", "direction", "rel L2", "max abs", "tol", "result"]
    body = [[r["dtype"], shape_str(r["shape"]), r["direction"], fmt(r["rel_l2"], ".2e"), fmt(r["max_abs"], ".2e"),
             f"{r['tol']:.1e}", "ok" if r["ok"] else "**FAIL**"] for r in rows]
    return "## Correctness against float64 ('-': NaN or inf)\n\n" + md_table(head, body, 3)


def graph_ms(fn, estimate_ms, quick):
    """Calls filling ~20 ms (1 to 100) captured in one CUDA graph; median replay time / calls."""
    calls = max(1, min(100, int(20 / max(estimate_ms, 1e-3))))
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=torch.cuda.current_stream()):  # raises for a call that synchronizes
        for _ in range(calls):
            fn()
    graph.replay()
    events = [[torch.cuda.Event(enable_timing=True) for _ in range(2)] for _ in range(5 if quick else 20)]
    for start, end in events:
        start.record()
        graph.replay()
        end.record()
    torch.cuda.synchronize()
    return statistics.median(start.elapsed_time(end) for start, end in events) / calls


def compiled(module):
    torch._dynamo.reset()  # a fresh compile per shape and dtype: the recompile limit is never reached
    return torch.compile(module.cuda(), dynamic=False)


def copy_floor(x):
    """The forward's floor: a device copy of x's bytes (reads x, writes out)."""
    return functools.partial(torch.empty_like(x).copy_, x)


def add_floor(x, dy):
    """The backward's floor: reads x and dy, writes dx."""
    return functools.partial(torch.add, x, dy, out=torch.empty_like(x))


def cute_layernorm(x):
    """quack's layernorm_fwd on x's (N*C, H*W) view, weight 1 and no bias: the instance norm's values.
    Its output is checked against float64 first (the peer is dropped, logged, where it is off or fails)."""
    from quack.rmsnorm import layernorm_fwd  # noqa: PLC0415 (only with --cute)

    rows = x.reshape(x.shape[0] * x.shape[1], -1)
    call = functools.partial(layernorm_fwd, rows, torch.ones(rows.shape[1], device=x.device), None, EPS)
    rel, _ = reference_errors(x, call().view_as(x))
    if not rel <= tolerance(str(x.dtype).removeprefix("torch.")):
        raise RuntimeError(f"quack layernorm_fwd: relative L2 error {rel:.2e} against float64")
    return call


def forward_makers(x, cute=False):
    """name -> builder of the call to time (built one at a time, so large peers never coexist)."""
    c, call = x.shape[1], functools.partial
    makers = {"ours": lambda: call(instance_norm.ModelNew(c).cuda(), x),
              "eager": lambda: call(nn.InstanceNorm2d(c).cuda(), x),
              "compile": lambda: call(compiled(nn.InstanceNorm2d(c)), x),
              "group_norm": lambda: call(F.group_norm, x, c)}
    if cute:
        makers[CUTE] = lambda: cute_layernorm(x)
    return {**makers, "copy": lambda: copy_floor(x)}


def backward_makers(x, dy):
    c, ops = x.shape[1], instance_norm.load_extension()

    def autograd(module):
        xg = x.detach().requires_grad_()
        return functools.partial(torch.autograd.grad, module.cuda()(xg), xg, dy, retain_graph=True)

    def op():
        _, stats = ops.forward(x, None, None, EPS)
        return functools.partial(ops.backward, dy, x, None, None, stats)

    return {"ours_op": op,
            "ours": lambda: autograd(instance_norm.ModelNew(c)),
            "eager": lambda: autograd(nn.InstanceNorm2d(c)),
            "compile": lambda: autograd(compiled(nn.InstanceNorm2d(c))),
            "floor": lambda: add_floor(x, dy)}


def forward_providers(args):
    return FORWARD[:-1] + (CUTE,) * args.cute + FORWARD[-1:]


def ratios(times, floor):
    ours = times.get("ours")
    best = min((times[p] for p in PEERS + (CUTE,) if times.get(p)), default=None)
    return {"ours/floor": ours / times[floor] if ours and times.get(floor) else None,
            "speedup": best / ours if ours and best else None}


def time_all(makers, quick, methods=tuple(METHODS), inspect=None):
    """{method: {name: ms}} for every maker, built and timed one at a time; a peer that fails to build
    or run is logged and gets None. inspect(name, result of the first call) runs before the timing."""
    from triton.testing import do_bench  # here, so that --help and --dry-run need no triton

    row = {method: dict.fromkeys(makers) for method in methods}
    for name, make in makers.items():
        fn = None
        try:
            fn = make()
            out = fn()  # compiles where it has to
            if inspect:
                inspect(name, out)
            out = None
            row["do_bench"][name] = do_bench(fn, warmup=25, rep=100 if quick else 400, return_mode="median")
            if "graph" in methods:
                row["graph"][name] = graph_ms(fn, row["do_bench"][name], quick)
        except Exception as error:
            log(f"    {name}{' (CUDA graph)' if row['do_bench'][name] else ''}: {first_line(error)}")
        fn = out = None
        free()
    return row


def timed(makers, floor, quick):
    """Both methods for every peer, and the ratios."""
    row = time_all(makers, quick)
    row["ratios"] = {method: ratios(row[method], floor) for method in METHODS}
    return row


def timing_tables(rows, kind, providers, floor, factor):
    """One table per method; factor = bytes moved / tensor bytes."""
    tables = []
    for method, how in METHODS.items():
        head = ["dtype", "shape", "plan"] + [f"{p} ms" for p in providers] + ["ours TB/s", f"ours/{floor}", "speedup"]
        body = []
        for r in rows:
            times, derived = r[method], r["ratios"][method]
            tbs = factor * r["bytes"] / times["ours"] / 1e9 if times["ours"] else None
            body.append([r["dtype"], shape_str(r["shape"]), r["plan"]] + [fmt(times[p]) for p in providers]
                        + [fmt(tbs, ".3f")] + [fmt(derived[k], ".2f", "x") for k in ("ours/floor", "speedup")])
        peers = ", ".join(p for p in PEERS + (CUTE,) if p in providers)
        tables.append(f"## {kind}, {how}\n\nms per call; speedup = best of {peers} / ours.\n\n"
                      + md_table(head, body, 3) + "\n\n" + geomean_line(rows, method))
    return tables


def geomean_line(rows, method):
    parts = []
    for dtype in dict.fromkeys(r["dtype"] for r in rows):
        v = [r["ratios"][method]["speedup"] for r in rows if r["dtype"] == dtype and r["ratios"][method]["speedup"]]
        if v:
            parts.append(f"{dtype} {statistics.geometric_mean(v):.2f}x")
    return "Geometric mean speedup: " + (", ".join(parts) or "-")


def isolated_ms(fns, calls=40, warmup=5):
    """Median time of isolated calls (synchronize, event, call, event, synchronize) of each entry of
    ``fns`` ({name: (fn, reset)}), the entries taken in turn within each round so that host or clock
    drift during the run falls on all of them alike (one entry timed after another gave the first
    entry of a row the slow calls)."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = {name: [] for name in fns}
    for _ in range(warmup + calls):
        for name, (fn, reset) in fns.items():
            reset()
            torch.cuda.synchronize()
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            times[name].append(start.elapsed_time(end))
    return {name: statistics.median(t[warmup:]) for name, t in times.items()}


def host_row(x):
    c = x.shape[1]
    nothing = lambda: None  # noqa: E731
    with torch.no_grad():
        row = isolated_ms({
            "ours": (functools.partial(instance_norm.ModelNew(c).cuda(), x), nothing),
            "eager": (functools.partial(nn.InstanceNorm2d(c).cuda(), x), nothing),
            "group_norm": (functools.partial(F.group_norm, x, c), nothing),
        })
    xg, dy = x.detach().requires_grad_(), torch.randn_like(x)
    train = {}
    for name, module in (("train_ours", instance_norm.ModelNew(c, affine=True).cuda()),
                         ("train_eager", nn.InstanceNorm2d(c, affine=True).cuda())):

        def reset(module=module):
            xg.grad = None
            module.zero_grad(set_to_none=True)

        train[name] = (lambda module=module: module(xg).backward(dy), reset)
    row.update(isolated_ms(train))
    return row


def host_table(rows):
    head = ["dtype", "shape", "ours ms", "eager ms", "group_norm ms", "speedup",
            "train ours ms", "train eager ms", "train speedup"]
    body = [[r["dtype"], shape_str(r["shape"]), fmt(r["ours"]), fmt(r["eager"]), fmt(r["group_norm"]),
             fmt(min(r["eager"], r["group_norm"]) / r["ours"], ".2f", "x"), fmt(r["train_ours"]),
             fmt(r["train_eager"]), fmt(r["train_eager"] / r["train_ours"], ".2f", "x")] for r in rows]
    return ("## Host: isolated eager calls (synchronize, event, call, event, synchronize; median of 40, peers in turn)\n\n"
            "Forward without grad; train = m(x).backward(dy) with affine=True; speedup = best peer / ours.\n\n"
            + md_table(head, body, 2))


# --------------------------------------------------------------------------------------------------
# --fused (issue 10): norm -> LeakyReLU blocks under torch.compile, and the eager fused module
# --------------------------------------------------------------------------------------------------
@contextlib.contextmanager
def compile_fusion(enabled):
    """instance_norm's compile fusion pass on (as imported) or off for what is compiled inside."""
    if enabled:
        yield
        return
    previous = instance_norm.set_compile_fusion(False)
    try:
        yield
    finally:
        instance_norm.set_compile_fusion(True if previous is None else previous)


def compiled_block(norm, x, fused_calls, name, fusion=True):
    """torch.compile(Sequential(norm, LeakyReLU)), compiled afresh by a first call on x with the FX and
    AOTAutograd caches off (so the code is generated here, not served from a cache);
    fused_calls[name] = the fused-op calls in the generated code. Returns the call to time."""
    import torch._functorch.config
    import torch._inductor.config
    from torch._inductor.utils import run_and_get_code

    block = compiled(nn.Sequential(norm, nn.LeakyReLU(SLOPE)))
    no_fx_cache = torch._inductor.config.patch(fx_graph_cache=False)
    no_aot_cache = torch._functorch.config.patch(enable_autograd_cache=False)
    with compile_fusion(fusion), no_fx_cache, no_aot_cache:
        _, codes = run_and_get_code(block, x)  # resets Dynamo first
    fused_calls[name] = sum(len(FUSED_CALL.findall(code)) for code in codes)
    return functools.partial(block, x)


def fused_makers(x, dy, fused_calls):
    """FUSED's builders (run under no_grad; the training step enables grad itself)."""
    c = x.shape[1]

    def fused_module(**kwargs):
        return instance_norm.InstanceNormAct2d(c, activation="leaky_relu", negative_slope=SLOPE, **kwargs).cuda()

    def train():
        m, xg = fused_module(affine=True), x.detach().requires_grad_()
        nn.init.ones_(m.weight)  # the defaults, which the float64 reference of dx assumes
        nn.init.zeros_(m.bias)

        def step():
            with torch.enable_grad():
                return torch.autograd.grad(m(xg), (xg, m.weight, m.bias), dy)

        return step

    makers = {"copy": lambda: copy_floor(x),
              "add": lambda: add_floor(x, dy),
              "compile_nn": lambda: compiled_block(nn.InstanceNorm2d(c), x, fused_calls, "compile_nn"),
              "compile_ours": lambda: compiled_block(instance_norm.ModelNew(c), x, fused_calls, "compile_ours"),
              "compile_unfused": lambda: compiled_block(instance_norm.ModelNew(c), x, fused_calls, "compile_unfused",
                                                        fusion=False),
              "fused_fwd": lambda: functools.partial(fused_module(), x),
              "fused_train": train}
    if not hasattr(instance_norm, "set_compile_fusion"):  # no off switch: no unfused column
        del makers["compile_unfused"]
    return makers


def fused_ratios(t):
    def ratio(a, b):
        return a / b if a and b else None

    floor = t["copy"] + t["add"] if t["copy"] and t["add"] else None
    return {"compile_ours/compile_nn": ratio(t["compile_ours"], t["compile_nn"]),
            "fused_fwd/copy": ratio(t["fused_fwd"], t["copy"]),
            "fused_train/(copy+add)": ratio(t["fused_train"], floor)}


def fused_case(dtype, shape, args, rng):
    """One shape and dtype of --fused: times, fused-op counts, errors against float64, ratios."""
    x = make_input(shape, getattr(torch, dtype), rng)
    dy = kink_safe(x, torch.randn_like(x))
    fused_calls, errors = {}, {}

    def inspect(name, out):  # every output against float64; the training step: its dx
        if name not in ("copy", "add"):
            train = name == "fused_train"
            rel, worst = reference_errors(x, out[0], dy, SLOPE) if train else reference_errors(x, out, slope=SLOPE)
            errors[name] = error_entry(rel, worst, tolerance(dtype, train))
            if not errors[name]["ok"]:
                log(f"    {name}: {error_text(rel, worst, errors[name])}")

    with torch.no_grad():
        timed_all = time_all(fused_makers(x, dy, fused_calls), args.quick, ("do_bench", "graph"), inspect)
    times = {name: timed_all["do_bench"].get(name) for name in FUSED}
    graph = {name: timed_all["graph"].get(name) for name in FUSED}
    ratios = fused_ratios(times)
    ratios["graph compile_ours/compile_nn"] = (graph["compile_ours"] / graph["compile_nn"]
                                               if graph["compile_ours"] and graph["compile_nn"] else None)
    row = {"dtype": dtype, "shape": list(shape), "bytes": x.numel() * x.element_size(), "do_bench": times,
           "graph": graph, "fused_calls": fused_calls, "errors": errors,
           "ok": all(e["ok"] for e in errors.values()), "ratios": ratios}
    log("  fused    " + "  ".join(f"{p} {fmt(times[p])}" for p in FUSED)
        + f"  fused calls {fused_calls}" + ("" if row["ok"] else "  CHECK FAILED"))
    x = dy = None  # freed before the next case (inspect holds them only until here)
    free()
    return row


def fused_cell(calls):
    """The 'fused?' column: fused-op calls in the ModelNew block's code (and in the unfused one's, if any)."""
    on, off = calls.get("compile_ours"), calls.get("compile_unfused")
    cell = "-" if on is None else f"yes ({on})" if on else "**no**"
    return cell + (f"; unfused block: {off}!" if off else "")


def fused_tables(rows):
    unfused = any(r["do_bench"]["compile_unfused"] for r in rows)  # no off switch, or none measured: no column
    main_shape = shape_str(MAIN[0])
    head = (["dtype", "shape", "copy ms", "nn block ms", "ModelNew block ms", "ModelNew/nn"]
            + ["ModelNew unfused ms"] * unfused + ["eager fused ms", "fused?"])
    body = [[r["dtype"], shape_str(r["shape"]), fmt(r["do_bench"]["copy"]), fmt(r["do_bench"]["compile_nn"]),
             fmt(r["do_bench"]["compile_ours"]), fmt(r["ratios"]["compile_ours/compile_nn"], ".2f", "x")]
            + [fmt(r["do_bench"]["compile_unfused"])] * unfused
            + [fmt(r["do_bench"]["fused_fwd"]), fused_cell(r["fused_calls"])] for r in rows]
    env = os.environ.get("INSTANCE_NORM_FUSION")
    block = (f"## Compiled block, forward without grad: torch.compile(nn.Sequential(norm, nn.LeakyReLU({SLOPE})))\n\n"
             "ms per call, do_bench median, L2 flushed; dynamic=False, compiled once per shape and dtype. "
             "norm = nn.InstanceNorm2d(C) (nn block) or instance_norm.ModelNew(C) with the compile fusion pass "
             "on (ModelNew block)" + (" and off (unfused)" if unfused else "") + "; eager fused = "
             "InstanceNormAct2d(C, activation=\"leaky_relu\") not compiled; copy = out.copy_(x), the floor. "
             "fused? = fused_forward calls in the ModelNew block's generated code (FX and AOTAutograd caches "
             "off)" + (f"; INSTANCE_NORM_FUSION={env} at import" if env is not None else "") + ". "
             f"Targets (issue 10): ModelNew/nn <= {TARGETS['block_main']}x at {main_shape} in float32 and "
             f"bfloat16, <= {TARGETS['block_any']:.2f}x at every shape.\n\n" + md_table(head, body, 2))
    head = ["dtype", "shape", "copy ms", "add ms", "fwd ms", "fwd/copy", "train ms", "train/(copy+add)"]
    body = [[r["dtype"], shape_str(r["shape"])] + [fmt(r["do_bench"][k]) for k in ("copy", "add", "fused_fwd")]
            + [fmt(r["ratios"]["fused_fwd/copy"], ".2f", "x"), fmt(r["do_bench"]["fused_train"]),
               fmt(r["ratios"]["fused_train/(copy+add)"], ".2f", "x")] for r in rows]
    eager = ("## InstanceNormAct2d(C, activation=\"leaky_relu\") eager against the floors\n\n"
             "ms per call, do_bench median, L2 flushed. fwd: forward without grad, against copy = out.copy_(x) "
             "(reads x, writes out). train: the training step torch.autograd.grad(m(x), (x, weight, bias), dy), "
             "affine=True, x.requires_grad, against the forward's floor plus the backward's, copy + add, where "
             "add = torch.add(x, dy, out=dx) (reads x and dy, writes dx). Targets (issue 10): at "
             f"{main_shape} in float32 fwd/copy <= {TARGETS['fused_fwd']}x, train/(copy+add) <= "
             f"{TARGETS['fused_train']}x.\n\n" + md_table(head, body, 2))
    return [targets_text(rows), block, graph_block_table(rows), eager, fused_check_table(rows)]


def graph_block_table(rows):
    """The compiled blocks in CUDA-graph replay: device time alone, where do_bench of a small block
    waits on the compiled wrapper's host time (README, issue 10: 57-66 us per call against a few us of
    kernels at (64,256,7,7))."""
    head = ["dtype", "shape", "copy ms", "nn block ms", "ModelNew block ms", "ModelNew/nn"]
    body = [[r["dtype"], shape_str(r["shape"])]
            + [fmt(r.get("graph", {}).get(k)) for k in ("copy", "compile_nn", "compile_ours")]
            + [fmt(r["ratios"].get("graph compile_ours/compile_nn"), ".2f", "x")] for r in rows]
    return ("## Compiled block in CUDA-graph replay (device time, L2 warm)\n\n"
            "The same blocks and copy, each call captured back to back in one CUDA graph (calls filling about "
            "20 ms), median replay time / calls: no host time and no launch gaps, the L2 not flushed (a "
            "small shape's bytes stay in it). '-': not capturable or not run.\n\n" + md_table(head, body, 2))


def targets_text(rows):
    """Issue 10's targets against this run's figures (a report; nothing is asserted)."""

    def at_main(dtype, key):
        return next((r["ratios"][key] for r in rows if r["dtype"] == dtype and tuple(r["shape"]) == MAIN[0]), None)

    def verdict(value, limit):
        return "not measured" if value is None else f"{value:.2f}x, " + ("met" if value <= limit else "**missed**")

    key, main_shape = "compile_ours/compile_nn", shape_str(MAIN[0])
    measured = [r for r in rows if r["ratios"][key] is not None]
    slower = [f"{r['dtype']} {shape_str(r['shape'])} {r['ratios'][key]:.2f}x"
              for r in measured if r["ratios"][key] > TARGETS["block_any"]]
    everywhere = (f"**missed** at {', '.join(slower)}" if slower else f"met at all {len(measured)}" if measured
                  else "not measured")
    items = [(f"compiled ModelNew block / nn.InstanceNorm2d block at {main_shape} <= {TARGETS['block_main']}x: "
              f"float32 {verdict(at_main('float32', key), TARGETS['block_main'])}, "
              f"bfloat16 {verdict(at_main('bfloat16', key), TARGETS['block_main'])}"),
             f"the same, never slower (<= {TARGETS['block_any']:.2f}x) at any shape measured: {everywhere}",
             f"eager InstanceNormAct2d forward / copy at {main_shape} float32 <= {TARGETS['fused_fwd']}x: "
             + verdict(at_main("float32", "fused_fwd/copy"), TARGETS["fused_fwd"]),
             f"its training step / (copy + add) at {main_shape} float32 <= {TARGETS['fused_train']}x: "
             + verdict(at_main("float32", "fused_train/(copy+add)"), TARGETS["fused_train"])]
    return "## Issue 10's targets in this run (do_bench medians, no assertion)\n\n" + "\n".join(f"- {i}" for i in items)


def fused_check_table(rows):
    names = ("compile_nn", "compile_ours", "compile_unfused", "fused_fwd", "fused_train")
    head = ["dtype", "shape"] + [f"{n} rel L2" for n in names] + ["tol fwd", "tol train", "result"]
    body = [[r["dtype"], shape_str(r["shape"])]
            + [fmt(r["errors"][n]["rel_l2"], ".2e") if n in r["errors"] else "not run" for n in names]
            + [f"{tolerance(r['dtype']):.1e}", f"{tolerance(r['dtype'], True):.1e}",
               "ok" if r["ok"] else "**FAIL**"] for r in rows]
    return (f"## Correctness against float64 ('-': NaN or inf)\n\nforward: leaky_relu(instance_norm(x), {SLOPE}); "
            "fused_train: its input gradient dx (weight 1, bias 0). Relative L2 error.\n\n" + md_table(head, body, 2))


def md_table(head, body, text_columns):
    lines = ["| " + " | ".join(head) + " |",
             "|" + "|".join("---" if i < text_columns else "---:" for i in range(len(head))) + "|"]
    return "\n".join(lines + ["| " + " | ".join(map(str, cells)) + " |" for cells in body])


def write(out_dir, name, meta, rows, tables):
    """name.json (meta and rows) and name.md (the tables); returns the markdown."""
    with open(os.path.join(out_dir, name + ".json"), "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=1)
    text = (f"# InstanceNorm2d benchmark: {name}\n\n{meta['device']}, torch {meta['torch']}, CUDA {meta['cuda']}, "
            f"{meta['date']}, seed {meta['seed']}: `{meta['command']}`\n\n" + "\n\n".join(tables) + "\n")
    with open(os.path.join(out_dir, name + ".md"), "w") as f:
        f.write(text)
    return text


def plot(rows, meta, path):
    """Achieved forward bandwidth (do_bench) against tensor size, one panel per dtype."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    dtypes = list(dict.fromkeys(r["dtype"] for r in rows))
    fig, axes = plt.subplots(1, len(dtypes), figsize=(6 * len(dtypes), 4.5), squeeze=False)
    for ax, dtype in zip(axes[0], dtypes):
        ordered = sorted((r for r in rows if r["dtype"] == dtype), key=lambda r: r["bytes"])
        for name in dict.fromkeys(FORWARD + (CUTE,)):
            points = [(r["bytes"] / 1e6, 2 * r["bytes"] / r["do_bench"][name] / 1e9)
                      for r in ordered if r["do_bench"].get(name)]
            if points:
                ax.plot(*zip(*points), marker="o", linestyle="--" if name == "copy" else "-", label=name)
        ax.set(xscale="log", xlabel="tensor size (MB)", ylabel="TB/s (read + write)", title=dtype)
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle(f"InstanceNorm2d forward, {meta['device']}, {meta['date']}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def run_case(dtype, shape, args, rng):
    """(forward row, backward row or None, host row or None) of one shape and dtype."""
    x = make_input(shape, getattr(torch, dtype), rng)
    base = {"dtype": dtype, "shape": list(shape), "bytes": x.numel() * x.element_size()}
    with torch.no_grad():
        fwd = {**base, "plan": str(instance_norm.chosen_plan(x)),
               **timed(forward_makers(x, args.cute), "copy", args.quick)}
    log("  forward  " + "  ".join(f"{p} {fmt(fwd['do_bench'][p])}" for p in forward_providers(args)))
    bwd = host = None
    if args.backward:
        dy = torch.randn_like(x)
        bwd = {**base, "plan": str(instance_norm.chosen_plan(x, backward=True)),
               **timed(backward_makers(x, dy), "floor", args.quick)}
        log("  backward " + "  ".join(f"{p} {fmt(bwd['do_bench'][p])}" for p in BACKWARD))
        del dy
    if args.host:
        host = {**base, **host_row(x)}
        log("  host     " + "  ".join(f"{k} {fmt(v)}" for k, v in host.items() if k not in base))
    del x
    free()
    return fwd, bwd, host


def main(argv=None):
    args = parse_args(argv)
    cases = [(dtype, shape) for dtype in args.dtypes for shape in args.shapes]
    if args.dry_run:
        for dtype, shape in cases:
            log(f"{dtype:9} {shape_str(shape):20} {math.prod(shape) * getattr(torch, dtype).itemsize / 1e9:8.3f} GB")
        log(f"{len(cases)} cases, seed {args.seed}, quick={args.quick}, backward={args.backward}, "
            f"host={args.host}, fused={args.fused}, out={args.out}")
        return 0
    if not torch.cuda.is_available():
        log("error: no CUDA device (--dry-run checks the arguments without one)")
        return 1
    os.makedirs(args.out, exist_ok=True)
    meta = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "cuda": torch.version.cuda,
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "seed": args.seed, "command": " ".join(["python", "benchmarks/bench.py"] + sys.argv[1:])}
    log(f"# {meta['device']} | torch {meta['torch']} | {meta['date']} | seed {args.seed}")
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    # One non-default stream for everything: autograd runs a backward on its forward's stream, so
    # that the backward calls can be captured in a CUDA graph on it too.
    with torch.cuda.stream(torch.cuda.Stream()):
        return (bench_fused if args.fused else bench_norm)(cases, args, rng, meta)


def bench_fused(cases, args, rng, meta):
    rows = []
    for i, (dtype, shape) in enumerate(cases):
        log(f"[{i + 1}/{len(cases)}] {dtype} {shape_str(shape)}")
        rows.append(fused_case(dtype, shape, args, rng))
    text = write(args.out, "fused", meta, rows, fused_tables(rows))
    log(f"\nwrote fused.json/.md in {args.out}\n\n{text}")
    if not all(r["ok"] for r in rows):
        log("CORRECTNESS FAILURE: see the correctness table (the times were taken all the same)")
        return 1
    return 0


def bench_norm(cases, args, rng, meta):
    checks = check(cases, args.backward, rng)
    texts = [write(args.out, "check", meta, checks, [check_table(checks)])]
    if not all(r["ok"] for r in checks):
        log("\n" + texts[0] + "\nCORRECTNESS FAILURE: no timing was run.")
        return 1
    results = []
    for i, (dtype, shape) in enumerate(cases):
        log(f"[{i + 1}/{len(cases)}] {dtype} {shape_str(shape)}")
        results.append(run_case(dtype, shape, args, rng))
    fwd, bwd, host = ([r[k] for r in results] for k in range(3))
    texts.append(write(args.out, "forward", meta, fwd, timing_tables(fwd, "Forward", forward_providers(args), "copy", 2)))
    if args.backward:
        texts.append(write(args.out, "backward", meta, bwd, timing_tables(bwd, "Backward", BACKWARD, "floor", 3)))
    if args.host:
        texts.append(write(args.out, "host", meta, host, [host_table(host)]))
    png = plot(fwd, meta, os.path.join(args.out, "bandwidth.png"))
    names = ["check", "forward"] + ["backward"] * args.backward + ["host"] * args.host
    log(f"\nwrote {', '.join(n + '.json/.md' for n in names)}{', bandwidth.png' if png else ''} in {args.out}\n")
    log("\n".join(texts))
    return 0


if __name__ == "__main__":
    if "--layouts" in sys.argv[1:]:  # issue 11's tables: channels_last 2-D, and 3-D in both layouts
        import layouts

        sys.exit(layouts.main([a for a in sys.argv[1:] if a != "--layouts"]))
    sys.exit(main())
