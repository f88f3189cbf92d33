#!/usr/bin/env python3
"""Benchmark instance_norm.ModelNew against nn.InstanceNorm2d (eager and torch.compile)
and a device-to-device copy of the same bytes (the memory-bandwidth floor).

Run from the repository root:

    python benchmarks/bench.py                       # full sweep, float32 + bfloat16
    python benchmarks/bench.py --quick --shapes main # only (112, 64, 512, 512)
    python benchmarks/bench.py --backward            # also time the backward pass
    python benchmarks/bench.py --dry-run             # fake timings, no GPU needed

For every shape and dtype, the forward output of ModelNew is first checked against a
float64 reference (relative error ||ours - ref|| / ||ref||); the script exits with code 1
at the end if any check fails (> 1e-5 for float32, > 1e-2 for 16-bit types, or NaN/Inf).

Outputs (in --out, default benchmarks/results): results.md, results.json, bandwidth.png.
Only torch is required; matplotlib is optional (the plot is skipped without it).
"""

import argparse
import datetime
import json
import math
import os
import random
import statistics
import sys
import time
import traceback

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO_ROOT not in sys.path:
    sys.path.insert(0, REPO_ROOT)

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

SWEEP_SHAPES = [
    (64, 256, 7, 7),
    (3, 5, 127, 129),
    (32, 3, 224, 224),
    (8, 512, 32, 32),
    (16, 64, 256, 256),
    (112, 64, 512, 512),
    (1, 2, 4096, 4096),
]
MAIN_SHAPE = (112, 64, 512, 512)

DTYPES = {
    "float32": torch.float32, "fp32": torch.float32,
    "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
    "float16": torch.float16, "fp16": torch.float16,
}
# forward tolerance on ||ours - ref|| / ||ref|| (ref computed in float64)
FWD_TOL = {torch.float32: 1e-5, torch.bfloat16: 1e-2, torch.float16: 1e-2}
# backward: reported only (a warning, does not change the exit code)
BWD_WARN_TOL = {torch.float32: 1e-4, torch.bfloat16: 2e-2, torch.float16: 2e-2}

FWD_PROVIDERS = ["ours", "eager", "compile", "copy"]
BWD_PROVIDERS = ["ours", "eager", "compile", "floor"]
EPS = 1e-5  # nn.InstanceNorm2d default, also ModelNew's


def log(*a):
    print(*a, flush=True)


def dtype_name(dt):
    return str(dt).replace("torch.", "")


def shape_str(shape):
    return "(" + ",".join(str(s) for s in shape) + ")"


def short_err(e):
    msg = "%s: %s" % (type(e).__name__, str(e).strip().splitlines()[0] if str(e).strip() else "")
    return msg


# --------------------------------------------------------------------------- arguments

def parse_shapes(text):
    if text == "sweep":
        return list(SWEEP_SHAPES)
    if text == "main":
        return [MAIN_SHAPE]
    shapes = []
    for item in text.split(","):
        item = item.strip().lower()
        if not item:
            continue
        parts = item.split("x")
        if len(parts) != 4:
            raise argparse.ArgumentTypeError(
                "shapes: 'main', 'sweep' or a comma list of NxCxHxW, got %r" % item)
        try:
            shp = tuple(int(p) for p in parts)
        except ValueError:
            raise argparse.ArgumentTypeError("bad shape %r" % item)
        if min(shp) < 1:
            raise argparse.ArgumentTypeError("bad shape %r" % item)
        shapes.append(shp)
    if not shapes:
        raise argparse.ArgumentTypeError("no shapes given")
    return shapes


def parse_dtypes(text):
    out = []
    for name in text.split(","):
        name = name.strip().lower()
        if not name:
            continue
        if name not in DTYPES:
            raise argparse.ArgumentTypeError(
                "unknown dtype %r (choose from float32, bfloat16, float16)" % name)
        if DTYPES[name] not in out:
            out.append(DTYPES[name])
    if not out:
        raise argparse.ArgumentTypeError("no dtypes given")
    return out


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="fewer repetitions")
    p.add_argument("--shapes", type=parse_shapes, default="sweep",
                   help="'sweep' (default), 'main' = (112,64,512,512), or a comma list NxCxHxW,...")
    p.add_argument("--dtypes", type=parse_dtypes, default="float32,bfloat16",
                   help="comma list from float32,bfloat16,float16 (default float32,bfloat16)")
    p.add_argument("--out", default=os.path.join(REPO_ROOT, "benchmarks", "results"),
                   help="output directory (default benchmarks/results)")
    p.add_argument("--no-compile", action="store_true", help="skip the torch.compile provider")
    p.add_argument("--backward", action="store_true", help="also time the backward pass")
    p.add_argument("--dry-run", action="store_true",
                   help="fake timings, no CUDA, no instance_norm import (tests the reporting)")
    p.add_argument("--seed", type=int, default=None,
                   help="random seed for the inputs (default: a fresh one each run, printed)")
    p.add_argument("--time-limit", type=float, default=520.0,
                   help="seconds; no new shape is started after this, so that the tables and "
                        "plot are still written within a 10-minute slot (default 520, 0 = none)")
    # hidden: run the real code path on CPU (wall-clock timer) to self-test the script
    p.add_argument("--device", default="cuda", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.seed is None:
        args.seed = int.from_bytes(os.urandom(4), "little") >> 1
    # argparse applies type= to string defaults too, but be defensive
    if isinstance(args.shapes, str):
        args.shapes = parse_shapes(args.shapes)
    if isinstance(args.dtypes, str):
        args.dtypes = parse_dtypes(args.dtypes)
    return args


# --------------------------------------------------------------------------- timing

class Timer:
    """Median time of one call in ms.

    Warm up, estimate one call, then time `reps` repetitions, each bracketed by CUDA
    events; a repetition is `inner` back-to-back calls (inner > 1 only for calls shorter
    than ~0.5 ms, so that tiny shapes are not dominated by event resolution). The number
    of repetitions adapts to a time budget per provider, with a floor of min_reps.
    """

    def __init__(self, device, quick):
        self.cuda = device == "cuda"
        self.warmup = 3 if quick else 5
        self.min_reps = 10 if quick else 20
        self.max_reps = 50 if quick else 200
        self.budget_ms = 250.0 if quick else 600.0
        self.batch_ms = 1.0  # target length of one repetition for tiny calls
        self.max_inner = 100

    def sync(self):
        if self.cuda:
            torch.cuda.synchronize()

    def _time(self, fn, reps, inner):
        if self.cuda:
            starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
            ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
            for i in range(reps):
                starts[i].record()
                for _ in range(inner):
                    fn()
                ends[i].record()
            torch.cuda.synchronize()
            return [s.elapsed_time(e) / inner for s, e in zip(starts, ends)]
        out = []
        for _ in range(reps):
            t0 = time.perf_counter()
            for _ in range(inner):
                fn()
            out.append((time.perf_counter() - t0) * 1e3 / inner)
        return out

    def measure(self, fn):
        for _ in range(self.warmup):
            fn()
        self.sync()
        est = statistics.median(self._time(fn, 3, 1))
        est = max(est, 1e-4)
        inner = 1
        if est < 0.5:
            inner = int(min(self.max_inner, max(2, math.ceil(self.batch_ms / est))))
        reps = int(self.budget_ms / (est * inner))
        reps = max(self.min_reps, min(self.max_reps, reps))
        times = self._time(fn, reps, inner)
        return {"ms": statistics.median(times), "min_ms": min(times), "reps": reps, "inner": inner}


# --------------------------------------------------------------------------- references

def _chunks(n, per_item, budget=1 << 26):
    """Split range(n) so that a chunk holds about `budget` elements (>= 1 item)."""
    step = max(1, budget // max(1, per_item))
    for i in range(0, n, step):
        yield i, min(n, i + step)


def fwd_rel_err(x, y, eps=EPS):
    """||y - ref|| / ||ref|| with ref = instance norm of x in float64, chunked over N."""
    if not isinstance(y, torch.Tensor):
        raise TypeError("output is %s, not a tensor" % type(y).__name__)
    if tuple(y.shape) != tuple(x.shape):
        raise ValueError("output shape %s != input shape %s" % (tuple(y.shape), tuple(x.shape)))
    if y.dtype != x.dtype:
        raise ValueError("output dtype %s != input dtype %s" % (y.dtype, x.dtype))
    n, c = x.shape[0], x.shape[1]
    num = den = 0.0
    finite = True
    for i, j in _chunks(n, x[0].numel()):
        xc = x[i:j].double().reshape(j - i, c, -1)
        xc = xc - xc.mean(-1, keepdim=True)
        ref = xc.mul_(torch.rsqrt(xc.pow(2).mean(-1, keepdim=True) + eps))
        yd = y[i:j].double().reshape(j - i, c, -1)
        if not bool(torch.isfinite(yd).all()):
            finite = False
        num += float((yd - ref).pow(2).sum())
        den += float(ref.pow(2).sum())
        del xc, ref, yd
    if not finite:
        return float("nan")
    return math.sqrt(num) / math.sqrt(den) if den > 0 else math.sqrt(num)


def bwd_rel_err(x, dy, dx, eps=EPS):
    """||dx - ref|| / ||ref||, ref = float64 gradient of instance norm (affine=False)."""
    if not isinstance(dx, torch.Tensor) or tuple(dx.shape) != tuple(x.shape):
        raise ValueError("bad gradient shape")
    n, c = x.shape[0], x.shape[1]
    num = den = 0.0
    finite = True
    for i, j in _chunks(n, x[0].numel()):
        xd = x[i:j].detach().double().reshape(j - i, c, -1)
        xd = xd - xd.mean(-1, keepdim=True)
        rstd = torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + eps)
        xhat = xd.mul_(rstd)
        g = dy[i:j].double().reshape(j - i, c, -1)
        ref = (g - g.mean(-1, keepdim=True) - xhat * (g * xhat).mean(-1, keepdim=True)) * rstd
        del xhat, g
        dd = dx[i:j].double().reshape(j - i, c, -1)
        if not bool(torch.isfinite(dd).all()):
            finite = False
        num += float((dd - ref).pow(2).sum())
        den += float(ref.pow(2).sum())
        del dd, ref
    if not finite:
        return float("nan")
    return math.sqrt(num) / math.sqrt(den) if den > 0 else math.sqrt(num)


# --------------------------------------------------------------------------- real benchmark

class Context:
    def __init__(self, args):
        self.args = args
        self.device = args.device
        self.timer = Timer(args.device, args.quick)
        self.inorm = None
        self.ext = None

    def free(self):
        import gc
        gc.collect()
        if self.device == "cuda":
            torch.cuda.synchronize()
            torch.cuda.empty_cache()

    def reset_dynamo(self):
        try:
            torch._dynamo.reset()
        except Exception as e:  # pragma: no cover
            log("  (torch._dynamo.reset failed: %s)" % short_err(e))


def configure_dynamo():
    cfg = getattr(getattr(torch, "_dynamo", None), "config", None)
    if cfg is None:
        return
    for name in ("cache_size_limit", "recompile_limit"):
        if hasattr(cfg, name):
            try:
                setattr(cfg, name, 64)
            except Exception:
                pass
    for name in ("accumulated_cache_size_limit", "accumulated_recompile_limit"):
        if hasattr(cfg, name):
            try:
                setattr(cfg, name, max(256, getattr(cfg, name)))
            except Exception:
                pass


def make_input(shape, dtype, device, seed):
    rng = random.Random("%d-%s-%s" % (seed, shape, dtype))
    scale = math.exp(rng.uniform(math.log(0.25), math.log(4.0)))
    offset = rng.uniform(-3.0, 3.0)
    torch.manual_seed(rng.randrange(1 << 31))
    x = torch.randn(shape, device=device, dtype=dtype)
    x.mul_(scale).add_(offset)
    return x, scale, offset


def run_forward_case(ctx, shape, dtype):
    args, dev, timer = ctx.args, ctx.device, ctx.timer
    n, c, h, w = shape
    numel = n * c * h * w
    itemsize = torch.empty((), dtype=dtype).element_size()
    row = {"dtype": dtype_name(dtype), "shape": list(shape), "hw": h * w, "numel": numel,
           "bytes": 2 * numel * itemsize, "plan": "?", "ms": {}, "timing": {}, "errors": {},
           "rel_err": {}, "tol": FWD_TOL[dtype], "ok": False}
    x, scale, offset = make_input(shape, dtype, dev, args.seed)
    row["input_scale"], row["input_offset"] = scale, offset

    if ctx.ext is not None:
        try:
            row["plan"] = str(ctx.ext.describe_plan(x))
        except Exception as e:
            row["plan"] = "?"
            row["errors"]["plan"] = short_err(e)

    models = {}
    try:
        models["ours"] = ctx.inorm.ModelNew(c).to(dev)
    except Exception as e:
        row["errors"]["ours"] = short_err(e)
    models["eager"] = nn.InstanceNorm2d(c).to(dev)

    # ---- correctness (before any timing)
    with torch.no_grad():
        for name in ("ours", "eager"):
            if name not in models:
                row["rel_err"][name] = float("nan")
                continue
            try:
                y = models[name](x)
                row["rel_err"][name] = fwd_rel_err(x, y)
            except Exception as e:
                row["rel_err"][name] = float("nan")
                row["errors"][name + "_check"] = short_err(e)
                if name == "ours":
                    traceback.print_exc()
            y = None
        if not args.no_compile:
            try:
                ctx.reset_dynamo()
                cm = torch.compile(nn.InstanceNorm2d(c).to(dev), dynamic=False)
                t0 = time.perf_counter()
                y = cm(x)
                timer.sync()
                row["compile_s"] = time.perf_counter() - t0
                row["rel_err"]["compile"] = fwd_rel_err(x, y)
                y = None
                models["compile"] = cm
            except Exception as e:
                y = None
                row["errors"]["compile"] = short_err(e)
                traceback.print_exc()
    err = row["rel_err"].get("ours", float("nan"))
    row["ok"] = bool(err <= row["tol"])  # False for NaN
    log("  check %-8s %-18s scale=%.3g offset=%+.3g  rel err ours=%.3e eager=%.3e%s  -> %s" % (
        row["dtype"], shape_str(shape), scale, offset, err, row["rel_err"].get("eager", float("nan")),
        (" compile=%.3e" % row["rel_err"]["compile"]) if "compile" in row["rel_err"] else "",
        "ok" if row["ok"] else "FAIL (tol %.0e)" % row["tol"]))
    ctx.free()

    # ---- timing
    copy_buf = torch.empty_like(x)
    fns = {
        "ours": (lambda m=models.get("ours"): m(x)) if "ours" in models else None,
        "eager": lambda m=models["eager"]: m(x),
        "compile": (lambda m=models.get("compile"): m(x)) if "compile" in models else None,
        "copy": lambda: copy_buf.copy_(x),
    }
    with torch.no_grad():
        for name in FWD_PROVIDERS:
            if name == "compile" and args.no_compile:
                row["ms"][name] = None
                continue
            fn = fns[name]
            if fn is None:
                row["ms"][name] = None
                row["errors"].setdefault(name, "not available")
                continue
            try:
                m = timer.measure(fn)
                row["ms"][name] = m["ms"]
                row["timing"][name] = m
            except Exception as e:
                row["ms"][name] = None
                row["errors"][name] = short_err(e)
                log("  %s failed: %s" % (name, short_err(e)))
            ctx.free()
    copy_buf = fns = models = None
    ctx.free()
    return row, x


def run_backward_case(ctx, shape, dtype, x):
    args, dev, timer = ctx.args, ctx.device, ctx.timer
    n, c, h, w = shape
    numel = x.numel()
    row = {"dtype": dtype_name(dtype), "shape": list(shape), "hw": h * w, "numel": numel,
           "bytes": 3 * numel * x.element_size(), "ms": {}, "timing": {}, "errors": {},
           "rel_err": {}, "warn_tol": BWD_WARN_TOL[dtype]}
    x = x.detach().requires_grad_(True)
    g = torch.Generator(device=dev)
    g.manual_seed(args.seed + 12345)
    dy = torch.randn(x.shape, device=dev, dtype=dtype, generator=g)

    def build(name):
        if name == "ours":
            return ctx.inorm.ModelNew(c).to(dev)
        if name == "eager":
            return nn.InstanceNorm2d(c).to(dev)
        ctx.reset_dynamo()
        return torch.compile(nn.InstanceNorm2d(c).to(dev), dynamic=False)

    for name in ("ours", "eager", "compile"):
        if name == "compile" and args.no_compile:
            row["ms"][name] = None
            continue
        y = None
        try:
            model = build(name)
            with torch.enable_grad():
                y = model(x)
                (dx,) = torch.autograd.grad(y, x, dy, retain_graph=True)
            row["rel_err"][name] = bwd_rel_err(x, dy, dx)
            del dx

            def fn():
                with torch.enable_grad():
                    return torch.autograd.grad(y, x, dy, retain_graph=True)

            m = timer.measure(fn)
            row["ms"][name] = m["ms"]
            row["timing"][name] = m
        except Exception as e:
            row["ms"][name] = None
            row["errors"][name] = short_err(e)
            log("  backward %s failed: %s" % (name, short_err(e)))
        y = model = None
        ctx.free()

    try:
        xd = x.detach()
        dx = torch.empty_like(xd)
        with torch.no_grad():
            m = timer.measure(lambda: torch.add(xd, dy, out=dx))
        row["ms"]["floor"] = m["ms"]
        row["timing"]["floor"] = m
        dx = None
    except Exception as e:
        row["ms"]["floor"] = None
        row["errors"]["floor"] = short_err(e)
    dy = x = None
    ctx.free()
    e = row["rel_err"].get("ours", float("nan"))
    row["warn"] = not (e <= row["warn_tol"])
    return row


# --------------------------------------------------------------------------- dry run

def fake_forward_row(shape, dtype, rng, no_compile, inject_error):
    n, c, h, w = shape
    numel = n * c * h * w
    itemsize = torch.empty((), dtype=dtype).element_size()
    nbytes = 2 * numel * itemsize
    j = lambda: rng.uniform(0.95, 1.05)  # noqa: E731
    copy = (nbytes / 3.0e9 + 0.004) * j()
    ms = {"ours": (nbytes / 2.8e9 + 0.006) * j(),
          "eager": (nbytes / 1.1e9 + 0.015) * j(),
          "compile": None if no_compile else (nbytes / 1.9e9 + 0.020) * j(),
          "copy": copy}
    errors = {}
    if inject_error and not no_compile:
        ms["compile"] = None
        errors["compile"] = "RuntimeError: fake failure injected by --dry-run"
    tol = FWD_TOL[dtype]
    err = tol * 10 ** rng.uniform(-3, -1)
    return {"dtype": dtype_name(dtype), "shape": list(shape), "hw": h * w, "numel": numel,
            "bytes": nbytes, "plan": "fake(K=4,G=%d)" % min(1024, h * w // 8 or 1), "ms": ms,
            "timing": {}, "errors": errors,
            "rel_err": {"ours": err, "eager": err * rng.uniform(0.5, 2),
                        "compile": err * rng.uniform(0.5, 2)},
            "tol": tol, "ok": True, "input_scale": 1.0, "input_offset": 0.0}


def fake_backward_row(shape, dtype, rng, no_compile):
    n, c, h, w = shape
    numel = n * c * h * w
    itemsize = torch.empty((), dtype=dtype).element_size()
    nbytes = 3 * numel * itemsize
    j = lambda: rng.uniform(0.95, 1.05)  # noqa: E731
    ms = {"ours": (nbytes / 2.6e9 + 0.008) * j(), "eager": (nbytes / 0.9e9 + 0.03) * j(),
          "compile": None if no_compile else (nbytes / 1.7e9 + 0.04) * j(),
          "floor": (nbytes / 3.0e9 + 0.004) * j()}
    err = BWD_WARN_TOL[dtype] * 10 ** rng.uniform(-3, -1)
    return {"dtype": dtype_name(dtype), "shape": list(shape), "hw": h * w, "numel": numel,
            "bytes": nbytes, "ms": ms, "timing": {}, "errors": {},
            "rel_err": {"ours": err, "eager": err, "compile": err},
            "warn_tol": BWD_WARN_TOL[dtype], "warn": False}


# --------------------------------------------------------------------------- derived numbers

def derive(row, floor_name):
    ms = row["ms"]
    o = ms.get("ours")
    d = {}
    d["tbs"] = {k: (row["bytes"] / v / 1e9 if v else None) for k, v in ms.items()}
    f = ms.get(floor_name)
    d["ours_over_floor"] = o / f if (o and f) else None
    e, cp = ms.get("eager"), ms.get("compile")
    d["vs_eager"] = e / o if (o and e) else None
    d["vs_compile"] = cp / o if (o and cp) else None
    cands = [v for v in (e, cp) if v]
    best = min(cands) if cands else None
    d["best_baseline"] = ("eager" if best == e else "compile") if best else None
    d["vs_best"] = best / o if (o and best) else None
    row["derived"] = d
    return row


def geomean(vals):
    vals = [v for v in vals if v and v > 0 and math.isfinite(v)]
    if not vals:
        return None
    return math.exp(sum(math.log(v) for v in vals) / len(vals))


def geomeans(rows, dtypes):
    out = {}
    for dt in dtypes:
        out[dt] = geomean([r["derived"]["vs_best"] for r in rows if r["dtype"] == dt])
    out["overall"] = geomean([r["derived"]["vs_best"] for r in rows])
    return out


# --------------------------------------------------------------------------- formatting

def f_ms(v):
    if v is None:
        return "-"
    return "%.3f" % v if v >= 1 else "%.4f" % v


def f_x(v, fmt="%.2fx"):
    return "-" if v is None else fmt % v


def f_e(v):
    if v is None:
        return "-"
    if isinstance(v, float) and math.isnan(v):
        return "NaN"
    return "%.2e" % v


def cell_ms(row, name):
    v = row["ms"].get(name)
    if v is None and name in row["errors"]:
        msg = row["errors"][name]
        return "error: " + (msg if len(msg) <= 24 else msg[:21] + "...")
    return f_ms(v)


def fwd_table(rows):
    head = ["dtype", "shape", "H*W", "plan", "ours ms", "eager ms", "compile ms", "copy ms",
            "ours TB/s", "ours/copy", "vs eager", "vs compile", "vs best"]
    body = []
    for r in rows:
        d = r["derived"]
        body.append([r["dtype"], shape_str(r["shape"]), str(r["hw"]), r.get("plan", "?"),
                     cell_ms(r, "ours"), cell_ms(r, "eager"), cell_ms(r, "compile"), cell_ms(r, "copy"),
                     f_x(d["tbs"].get("ours"), "%.3f"), f_x(d["ours_over_floor"]),
                     f_x(d["vs_eager"]), f_x(d["vs_compile"]), f_x(d["vs_best"])])
    return head, body


def check_table(rows):
    head = ["dtype", "shape", "rel err ours", "rel err eager", "rel err compile", "tol", "result"]
    body = []
    for r in rows:
        body.append([r["dtype"], shape_str(r["shape"]), f_e(r["rel_err"].get("ours")),
                     f_e(r["rel_err"].get("eager")), f_e(r["rel_err"].get("compile")),
                     "%.0e" % r["tol"], "ok" if r["ok"] else "FAIL"])
    return head, body


def bwd_table(rows):
    head = ["dtype", "shape", "H*W", "ours ms", "eager ms", "compile ms", "floor ms", "ours TB/s",
            "ours/floor", "vs eager", "vs compile", "vs best", "dx err ours", "dx err eager"]
    body = []
    for r in rows:
        d = r["derived"]
        body.append([r["dtype"], shape_str(r["shape"]), str(r["hw"]),
                     cell_ms(r, "ours"), cell_ms(r, "eager"), cell_ms(r, "compile"), cell_ms(r, "floor"),
                     f_x(d["tbs"].get("ours"), "%.3f"), f_x(d["ours_over_floor"]),
                     f_x(d["vs_eager"]), f_x(d["vs_compile"]), f_x(d["vs_best"]),
                     f_e(r["rel_err"].get("ours")) + (" WARN" if r.get("warn") else ""),
                     f_e(r["rel_err"].get("eager"))])
    return head, body


def text_table(head, body):
    widths = [max(len(str(x)) for x in col) for col in zip(head, *body)] if body else [len(h) for h in head]
    line = lambda cells: "  ".join(str(c).rjust(w) for c, w in zip(cells, widths))  # noqa: E731
    out = [line(head), "  ".join("-" * w for w in widths)]
    out += [line(b) for b in body]
    return "\n".join(out)


def md_table(head, body):
    esc = lambda s: str(s).replace("|", "\\|")  # noqa: E731
    out = ["| " + " | ".join(esc(h) for h in head) + " |",
           "|" + "|".join("---" if i < 2 else "---:" for i in range(len(head))) + "|"]
    out += ["| " + " | ".join(esc(c) for c in b) + " |" for b in body]
    return "\n".join(out)


def geo_lines(gm, what):
    parts = ["%s %s" % (k, f_x(v)) for k, v in gm.items()]
    return "geometric mean speedup of ours vs best-of(eager, compile), %s: %s" % (what, ", ".join(parts))


def header_line(meta, fwd_rows):
    s = "device: %s | torch %s | CUDA %s | %s" % (meta["device"], meta["torch"], meta["cuda"], meta["date"])
    floors = []
    for r in fwd_rows:
        if tuple(r["shape"]) == MAIN_SHAPE and r["ms"].get("copy"):
            floors.append("%s %s ms (%.3f TB/s)" % (r["dtype"], f_ms(r["ms"]["copy"]),
                                                    r["derived"]["tbs"]["copy"]))
    if floors:
        s += " | copy floor %s: %s" % (shape_str(MAIN_SHAPE), ", ".join(floors))
    return s


# --------------------------------------------------------------------------- outputs

def _json_clean(o):
    """NaN/Inf -> None so that the file is strict JSON."""
    if isinstance(o, float):
        return o if math.isfinite(o) else None
    if isinstance(o, dict):
        return {str(k): _json_clean(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_json_clean(v) for v in o]
    return o


def write_outputs(out_dir, meta, fwd_rows, bwd_rows, dtypes, final):
    os.makedirs(out_dir, exist_ok=True)
    gm_f = geomeans(fwd_rows, dtypes)
    gm_b = geomeans(bwd_rows, dtypes) if bwd_rows else None
    failures = ["%s %s: rel err %s > %.0e%s" % (
        r["dtype"], shape_str(r["shape"]), f_e(r["rel_err"].get("ours")), r["tol"],
        (" (%s)" % r["errors"]["ours_check"]) if "ours_check" in r["errors"] else "")
        for r in fwd_rows if not r["ok"]]
    data = {"meta": meta, "complete": final, "forward": fwd_rows, "backward": bwd_rows,
            "geomean_vs_best": {"forward": gm_f, "backward": gm_b}, "failures": failures}
    tmp = os.path.join(out_dir, "results.json.tmp")
    with open(tmp, "w") as f:
        json.dump(_json_clean(data), f, indent=1, default=str)
    os.replace(tmp, os.path.join(out_dir, "results.json"))

    md = ["# InstanceNorm2d benchmark" + ("" if final else " (partial: run still in progress or aborted)"),
          "", header_line(meta, fwd_rows), "",
          "Timing: %s. ms = median per call. TB/s = bytes read + written / time "
          "(forward 2 x numel x itemsize; backward 3 x numel x itemsize). copy = `out.copy_(x)`, "
          "backward floor = `torch.add(x, dy, out=dx)`. Shapes whose tensors fit in L2 "
          "(50 MB on H100) can exceed HBM bandwidth." % meta["timing"], "",
          "## Forward correctness (relative error vs float64 reference)", "",
          md_table(*check_table(fwd_rows)), "",
          "## Forward", "", md_table(*fwd_table(fwd_rows)), "", geo_lines(gm_f, "forward"), ""]
    if bwd_rows:
        md += ["## Backward (torch.autograd.grad of y w.r.t. x, graph retained)", "",
               md_table(*bwd_table(bwd_rows)), "", geo_lines(gm_b, "backward"), ""]
    if failures:
        md += ["## FAILURES", ""] + ["- " + f for f in failures] + [""]
    if meta.get("skipped"):
        md += ["## Skipped (time limit)", ""] + ["- " + s for s in meta["skipped"]] + [""]
    errs = []
    for tag, rows in (("forward", fwd_rows), ("backward", bwd_rows)):
        for r in rows:
            for k, v in r["errors"].items():
                errs.append("- %s %s %s %s: %s" % (tag, r["dtype"], shape_str(r["shape"]), k, v))
    if errs:
        md += ["## Errors", ""] + errs + [""]
    with open(os.path.join(out_dir, "results.md"), "w") as f:
        f.write("\n".join(md))
    return gm_f, gm_b, failures


def plot(out_dir, meta, fwd_rows, dtypes):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as e:
        log("matplotlib not available (%s): skipping bandwidth.png" % short_err(e))
        return None
    dts = [dt for dt in dtypes if any(r["dtype"] == dt for r in fwd_rows)]
    if not dts:
        return None
    fig, axes = plt.subplots(1, len(dts), figsize=(6.5 * len(dts), 4.8), squeeze=False)
    styles = {"ours": ("C3", "o", "-"), "eager": ("C0", "s", "-"),
              "compile": ("C2", "^", "-"), "copy": ("k", "x", "--")}
    for ax, dt in zip(axes[0], dts):
        rows = sorted([r for r in fwd_rows if r["dtype"] == dt], key=lambda r: r["hw"])
        for name in FWD_PROVIDERS:
            pts = [(r["hw"], r["derived"]["tbs"].get(name)) for r in rows]
            pts = [(a, b) for a, b in pts if b is not None]
            if not pts:
                continue
            col, mk, ls = styles[name]
            ax.plot([p[0] for p in pts], [p[1] for p in pts], color=col, marker=mk, linestyle=ls,
                    label=name)
        for r in rows:
            v = r["derived"]["tbs"].get("ours")
            if v is not None:
                ax.annotate(shape_str(r["shape"]), (r["hw"], v), textcoords="offset points",
                            xytext=(4, 6), fontsize=6.5, color="C3")
        ax.set_xscale("log")
        ax.set_ylim(bottom=0)
        ax.set_xlabel("elements per instance (H*W)")
        ax.set_ylabel("achieved TB/s (read + write)")
        ax.set_title(dt)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(loc="upper left", fontsize=8)
    fig.suptitle("InstanceNorm2d forward bandwidth - %s - %s" % (meta["device"], meta["date"]),
                 fontsize=10)
    fig.tight_layout()
    path = os.path.join(out_dir, "bandwidth.png")
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


# --------------------------------------------------------------------------- main

def main(argv=None):
    args = parse_args(argv)
    dtypes = [dtype_name(d) for d in args.dtypes]
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    meta = {"date": now, "torch": torch.__version__, "cuda": str(torch.version.cuda),
            "quick": args.quick, "shapes": [list(s) for s in args.shapes], "dtypes": dtypes,
            "compile": not args.no_compile, "backward": args.backward, "dry_run": args.dry_run,
            "seed": args.seed}
    if args.dry_run:
        meta["device"] = "DRY RUN (fake timings)"
        meta["timing"] = "fake"
    elif args.device == "cuda":
        if not torch.cuda.is_available():
            log("error: CUDA is not available (use --dry-run to test the script without a GPU)")
            return 1
        meta["device"] = torch.cuda.get_device_name()
        meta["timing"] = ("CUDA events; warm-up, then median over >= %d repetitions, a repetition "
                          "being 1 call (or a batch of up to 100 calls for calls < 0.5 ms, divided)"
                          % (10 if args.quick else 20))
    else:
        meta["device"] = "cpu (self-test)"
        meta["timing"] = "wall clock on CPU (self-test only)"
    log("# " + " | ".join("%s=%s" % (k, meta[k]) for k in ("device", "torch", "cuda", "date")))
    log("# shapes=%s dtypes=%s quick=%s compile=%s backward=%s out=%s" % (
        ",".join(shape_str(s) for s in args.shapes), ",".join(dtypes), args.quick,
        not args.no_compile, args.backward, args.out))

    fwd_rows, bwd_rows = [], []
    # shapes outer, dtypes inner: if the time limit cuts the run short, the shapes done so far
    # have every dtype; the tables are sorted by dtype afterwards.
    cases = [(dt, shp) for shp in args.shapes for dt in args.dtypes]
    skipped = []
    meta["skipped"] = skipped
    t_start = time.perf_counter()

    if args.dry_run:
        rng = random.Random(args.seed)
        for k, (dt, shp) in enumerate(cases):
            log("[%d/%d] %s %s (fake)" % (k + 1, len(cases), dtype_name(dt), shape_str(shp)))
            fwd_rows.append(derive(fake_forward_row(shp, dt, rng, args.no_compile,
                                                    inject_error=(k == 1)), "copy"))
            if args.backward:
                bwd_rows.append(derive(fake_backward_row(shp, dt, rng, args.no_compile), "floor"))
            write_outputs(args.out, meta, fwd_rows, bwd_rows, dtypes, final=False)
    else:
        ctx = Context(args)
        log("importing instance_norm (builds the extension on first use, may take a minute) ...")
        try:
            import instance_norm
            ctx.inorm = instance_norm
        except Exception:
            traceback.print_exc()
            log("error: cannot import instance_norm from %s" % REPO_ROOT)
            return 1
        t0 = time.perf_counter()
        log("building/loading the extension ...")
        try:
            ctx.ext = instance_norm.load_extension()
            log("extension ready in %.1f s" % (time.perf_counter() - t0))
        except Exception as e:
            log("load_extension() failed (%s); plans will show '?'" % short_err(e))
            ctx.ext = None
        configure_dynamo()
        for k, (dt, shp) in enumerate(cases):
            tc = time.perf_counter()
            if args.time_limit and tc - t_start > args.time_limit:
                skipped.append("%s %s" % (dtype_name(dt), shape_str(shp)))
                log("[%d/%d] %s %s SKIPPED (time limit)" % (k + 1, len(cases), dtype_name(dt), shape_str(shp)))
                continue
            log("[%d/%d] %s %s" % (k + 1, len(cases), dtype_name(dt), shape_str(shp)))
            x = None
            try:
                row, x = run_forward_case(ctx, shp, dt)
            except Exception as e:  # e.g. out of memory while making the input
                traceback.print_exc()
                n, c, h, w = shp
                row = {"dtype": dtype_name(dt), "shape": list(shp), "hw": h * w,
                       "numel": n * c * h * w, "bytes": 2 * n * c * h * w * torch.empty((), dtype=dt).element_size(),
                       "plan": "?", "ms": {p: None for p in FWD_PROVIDERS}, "timing": {},
                       "errors": {"ours_check": short_err(e), "ours": short_err(e)},
                       "rel_err": {"ours": float("nan")}, "tol": FWD_TOL[dt], "ok": False}
            derive(row, "copy")
            fwd_rows.append(row)
            d = row["derived"]
            log("  ms: " + ", ".join("%s=%s" % (p, cell_ms(row, p)) for p in FWD_PROVIDERS)
                + " | ours %s TB/s, vs best %s" % (f_x(d["tbs"].get("ours"), "%.3f"), f_x(d["vs_best"])))
            if args.backward and x is not None:
                try:
                    brow = run_backward_case(ctx, shp, dt, x)
                    derive(brow, "floor")
                    bwd_rows.append(brow)
                    log("  bwd ms: " + ", ".join("%s=%s" % (p, cell_ms(brow, p)) for p in BWD_PROVIDERS)
                        + " | dx err ours %s" % f_e(brow["rel_err"].get("ours")))
                except Exception as e:
                    traceback.print_exc()
                    log("  backward case failed: %s" % short_err(e))
            x = None
            ctx.free()
            log("  (%.1f s for this case, %.1f s total)" % (time.perf_counter() - tc,
                                                          time.perf_counter() - t_start))
            write_outputs(args.out, meta, fwd_rows, bwd_rows, dtypes, final=False)

    meta["total_s"] = round(time.perf_counter() - t_start, 1)
    order = lambda r: (dtypes.index(r["dtype"]),  # noqa: E731
                       [list(s) for s in args.shapes].index(list(r["shape"])))
    fwd_rows.sort(key=order)
    bwd_rows.sort(key=order)
    gm_f, gm_b, failures = write_outputs(args.out, meta, fwd_rows, bwd_rows, dtypes, final=True)
    png = None
    try:
        png = plot(args.out, meta, fwd_rows, dtypes)
    except Exception as e:
        traceback.print_exc()
        log("plot failed: %s" % short_err(e))

    log("")
    log("=" * 100)
    log(header_line(meta, fwd_rows))
    log("")
    log("Forward correctness (||y - ref|| / ||ref||, ref in float64):")
    log(text_table(*check_table(fwd_rows)))
    log("")
    log("Forward timings (ms = median per call; TB/s = 2*numel*itemsize / time):")
    log(text_table(*fwd_table(fwd_rows)))
    log(geo_lines(gm_f, "forward"))
    if bwd_rows:
        log("")
        log("Backward timings (autograd.grad of y w.r.t. x; floor = torch.add(x, dy, out=dx); "
            "TB/s = 3*numel*itemsize / time):")
        log(text_table(*bwd_table(bwd_rows)))
        log(geo_lines(gm_b, "backward"))
    errs = [(tag, r["dtype"], r["shape"], k, v) for tag, rows in (("forward", fwd_rows), ("backward", bwd_rows))
            for r in rows for k, v in r["errors"].items()]
    if errs:
        log("")
        log("Errors:")
        for tag, dt, shp, k, v in errs:
            log("  %s %s %s %s: %s" % (tag, dt, shape_str(shp), k, v))
    if skipped:
        log("")
        log("SKIPPED (time limit %.0f s reached): %s" % (args.time_limit, ", ".join(skipped)))
    log("")
    log("wrote %s, %s%s (%.1f s)" % (os.path.join(args.out, "results.md"),
                                    os.path.join(args.out, "results.json"),
                                    (", " + png) if png else "", meta["total_s"]))
    if failures:
        log("")
        log("CORRECTNESS FAILURE of ours (forward):")
        for f in failures:
            log("  " + f)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
