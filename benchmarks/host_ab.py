"""Host time per eager call of several instance_norm.py versions loaded in one process: the module,
its op, InstanceNormAct2d, eval mode, F.group_norm, and the training step against nn.InstanceNorm2d's;
back to back, the least of 5 rounds of 1000 calls, the versions taken in turn within each round (host
time drifts by microseconds between processes). A dev tool (eighth session).

    python benchmarks/host_ab.py OLD.py,instance_norm.py[,INSTRUMENTED.py]

With a last version written by benchmarks/instrument_host.py, its C++ stages are printed too.
"""
import importlib.util, sys, time
import torch, torch.nn as nn, torch.nn.functional as F

def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    m = importlib.util.module_from_spec(spec); sys.modules[name] = m
    spec.loader.exec_module(m); m.load_extension()
    return m

paths = sys.argv[1].split(",")
mods = [load(p, f"v{i}") for i, p in enumerate(paths)]
print("device", torch.cuda.get_device_name(), time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), flush=True)
print("versions:", " ".join(f"v{i}={p}" for i, p in enumerate(paths)))

def timeit(cases, n=1000, reps=5, setup=None):
    res = {k: [] for k in cases}
    for f in cases.values():
        for _ in range(30): f()
    for _ in range(reps):
        for k, f in cases.items():  # interleaved: drift hits every case alike
            torch.cuda.synchronize(); t = time.perf_counter()
            for _ in range(n): f()
            torch.cuda.synchronize()
            res[k].append((time.perf_counter() - t) / n * 1e6)
    return {k: min(v) for k, v in res.items()}

for dtype, shape in ((torch.float32, (64, 256, 7, 7)), (torch.bfloat16, (64, 256, 7, 7)), (torch.float32, (3, 5, 127, 129)),
                     (torch.float32, (8, 512, 32, 32))):
    x = torch.randn(shape, device="cuda", dtype=dtype); c = shape[1]
    dy = torch.randn_like(x)
    cases, train = {}, {}
    for i, m in enumerate(mods):
        mod = m.ModelNew(c).cuda(); act = m.InstanceNormAct2d(c, activation="leaky_relu").cuda()
        ev = m.ModelNew(c, track_running_stats=True).cuda().eval()
        cases[f"mod/v{i}"] = lambda mod=mod: mod(x)
        cases[f"op/v{i}"] = lambda m=m: m._ops.forward.default(x, None, None, 1e-5)
        if len(m._ops.forward.default._schema.arguments) > 4:  # stats=False (ninth session on)
            cases[f"op_nostats/v{i}"] = lambda m=m: m._ops.forward.default(x, None, None, 1e-5, False)
        cases[f"act/v{i}"] = lambda act=act: act(x)
        cases[f"eval/v{i}"] = lambda ev=ev: ev(x)
        w = m.ModelNew(c, affine=True).cuda().to(dtype); xr = x.clone().requires_grad_(True)
        def step(w=w, xr=xr):
            xr.grad = None; w.weight.grad = None; w.bias.grad = None
            w(xr).backward(dy)
        train[f"step/v{i}"] = step
    cases["F.group_norm"] = lambda: F.group_norm(x, c)
    nnw = nn.InstanceNorm2d(c, affine=True).cuda().to(dtype); xn = x.clone().requires_grad_(True)
    def nstep():
        xn.grad = None; nnw.weight.grad = None; nnw.bias.grad = None
        nnw(xn).backward(dy)
    train["step/nn"] = nstep
    with torch.no_grad():
        r = timeit(cases)
    print(f"\n{dtype} {shape} no_grad us/call (min of 5 x 1000, interleaved):")
    print("  " + "  ".join(f"{k}={v:.2f}" for k, v in r.items()))
    r = timeit(train, n=300)
    print(f"  train step us (x.grad etc reset, .backward(dy)): " + "  ".join(f"{k}={v:.1f}" for k, v in r.items()), flush=True)

# stage breakdown from the instrumented build (last version if it has prof_read)
m = mods[-1]
if hasattr(m._ops, "prof_read"):
    names = {0: "entry->wants_grad", 1: "->forward_impl entry (redispatch)", 2: "check_input+guard", 3: "shape_of", 4: "plan_for",
             5: "input_for", 6: "empty y", 7: "empty stats", 8: "problem/epilogue/channel vectors", 9: "run: launch setup",
             10: "launch", 11: "run return", 12: "below return (redispatch out)", 13: "apply->NormFunction::forward",
             14: "save_for_backward etc", 15: "apply wrap outputs", 16: "bwd: apply->Refusing::forward", 17: "bwd checks+guard",
             18: "bwd shape+plan", 19: "bwd input/stats/dx/sums", 20: "bwd dy/epilogue/vectors", 21: "bwd run return",
             22: "bwd redispatch out", 23: "bwd apply wrap", 25: "bwd launch setup", 26: "bwd launch", 27: "bwd channel_gradients"}
    for dtype, shape in ((torch.float32, (64, 256, 7, 7)), (torch.float32, (3, 5, 127, 129))):
        x = torch.randn(shape, device="cuda", dtype=dtype); c = shape[1]; dy = torch.randn_like(x)
        w = torch.ones(c, device="cuda"); b = torch.zeros(c, device="cuda")
        with torch.no_grad():
            stats = m._ops.forward.default(x, w, b, 1e-5)[1]
        runs = {
            "forward no_grad": lambda: m._ops.forward.default(x, None, None, 1e-5),
            "forward grad (x requires grad)": lambda: m._ops.forward.default(xq, w, b, 1e-5),
            "backward op direct (no grad)": lambda: m._ops.backward.default(dy, x, w, b, stats),
        }
        xq = x.clone().requires_grad_(True)
        for name, f in runs.items():
            ctx = torch.no_grad() if "no grad" in name or "no_grad" in name else torch.enable_grad()
            with ctx:
                for _ in range(200): f()
                torch.cuda.synchronize(); m._ops.prof_read()
                n = 2000
                t = time.perf_counter()
                for _ in range(n): f()
                host = (time.perf_counter() - t) / n * 1e6
                torch.cuda.synchronize()
            v = m._ops.prof_read(); T, H = v[:32], v[32:]
            total = sum(T) / n
            print(f"\ninstrumented {dtype} {shape} {name}: python-side per call {host:.2f} us, marked C++ {total:.2f} us")
            for i in range(32):
                if H[i]:
                    print(f"   [{i:2d}] {names.get(i, '?'):36s} {T[i] / H[i]:6.2f} us  x{H[i] / n:.0f}")
