"""A/B/n of several instance_norm.py files in one process: device time of multi-kernel calls.
do_bench (L2 flushed) and CUDA-graph replay (calls back to back, L2 warm) of: forward no grad,
train-mode forward with running statistics, the training step (forward + backward, affine), and
(nineteenth session) eval-mode forward and training step on running statistics (cases eval, evaltrain);
(twenty-first) the fused module's forward, affine gelu (act) and silu + residual (actres), and its
training step with gelu (acttrain); (twenty-second) the backward op alone, plain (bwd) and affine (bwdaff);
(thirty-fourth) the affine forward, no grad (fwdaff).
usage: python pdl_ab_s21.py name=path ... [--rounds 2] [--shapes ...] [--layout contiguous|cl]"""
import argparse, importlib.util, statistics, sys, time
import torch, triton

def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    m = importlib.util.module_from_spec(spec); sys.modules[name] = m
    spec.loader.exec_module(m); m.load_extension()
    return m

def bench(fn):
    return triton.testing.do_bench(fn, warmup=10, rep=100, return_mode="median") * 1e3

def graph_us(fn, est_us):
    calls = max(1, min(100, int(20000 / max(est_us, 1.0))))
    side = torch.cuda.Stream(); side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2): fn()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(calls): fn()
    g.replay(); torch.cuda.synchronize()
    ev = [[torch.cuda.Event(enable_timing=True) for _ in range(2)] for _ in range(7)]
    for a, b in ev:
        a.record(); g.replay(); b.record()
    torch.cuda.synchronize()
    return statistics.median(a.elapsed_time(b) for a, b in ev) / calls * 1e3

ap = argparse.ArgumentParser()
ap.add_argument("files", nargs="+")
ap.add_argument("--rounds", type=int, default=2)
ap.add_argument("--shapes", default="64x256x7x7,8x512x32x32,4x128x128x128,32x3x224x224,16x64x256x256,1x2x4096x4096")
ap.add_argument("--dtypes", default="float32,bfloat16")
ap.add_argument("--layout", default="contiguous")
ap.add_argument("--cases", default="fwd,run,train")
a = ap.parse_args()
mods = [(f.split("=")[0], load(f.split("=")[1], "in_" + f.split("=")[0])) for f in a.files]
print("loaded", [n for n, _ in mods], flush=True)
for text in a.shapes.split(","):
    shape = tuple(int(v) for v in text.split("x"))
    for dtype in a.dtypes.split(","):
        x0 = torch.randn(shape, device="cuda", dtype=getattr(torch, dtype))
        if a.layout == "cl": x0 = x0.contiguous(memory_format=torch.channels_last)
        dy = torch.randn_like(x0); out = torch.empty_like(x0)
        for case in a.cases.split(","):
            res = {n: [] for n, _ in mods}; floor = []
            for rnd in range(a.rounds):
                floor.append(bench(lambda: torch.add(x0, dy, out=out)) if "train" in case or case.startswith("bwd")
                             else bench(lambda: out.copy_(x0)))
                # The builds' order rotates by round (twenty-third session's review: a fixed order lets a
                # position bias read as a consistent difference).
                for name, m in mods[rnd % len(mods):] + mods[:rnd % len(mods)]:
                    if case == "fwd":
                        norm = m.ModelNew(shape[1]).cuda()
                        def fn():
                            with torch.no_grad(): norm(x0)
                    elif case == "fwdaff":  # thirty-fourth session: the affine forward (the training step's)
                        norm = m.ModelNew(shape[1], affine=True).cuda()
                        def fn():
                            with torch.no_grad(): norm(x0)
                    elif case == "run":
                        norm = m.ModelNew(shape[1], track_running_stats=True).cuda().train()
                        def fn():
                            with torch.no_grad(): norm(x0)
                    elif case == "eval":
                        norm = m.ModelNew(shape[1], track_running_stats=True).cuda().eval()
                        def fn():
                            with torch.no_grad(): norm(x0)
                    elif case == "evaltrain":
                        norm = m.ModelNew(shape[1], affine=True, track_running_stats=True).cuda().eval()
                        xg = x0.detach().clone().requires_grad_()
                        def fn():
                            torch.autograd.backward(norm(xg), dy)
                    elif case in ("act", "actres"):
                        norm = m.InstanceNormAct2d(shape[1], affine=True, activation="gelu" if case == "act" else "silu").cuda()
                        res_in = dy if case == "actres" else None
                        def fn():
                            with torch.no_grad(): norm(x0, res_in)
                    elif case in ("bwd", "bwdaff"):
                        # The backward op alone (bench.py's ours_op), not through autograd: autograd runs a
                        # backward node on its forward's stream, and a forward run outside the capture left
                        # the legacy stream to join it, which CUDA refuses (pytorch#164302; review of the
                        # twenty-second session).
                        ops = m.load_extension()
                        w = b = None
                        if case == "bwdaff":
                            w, b = torch.randn(shape[1], device="cuda"), torch.randn(shape[1], device="cuda")
                        _, stats = ops.forward(x0, w, b, 1e-5)
                        def fn(ops=ops, w=w, b=b, stats=stats):
                            ops.backward(dy, x0, w, b, stats)
                    elif case == "acttrain":
                        norm = m.InstanceNormAct2d(shape[1], affine=True, activation="gelu").cuda()
                        xg = x0.detach().clone().requires_grad_()
                        def fn():
                            torch.autograd.backward(norm(xg), dy)
                    else:
                        norm = m.ModelNew(shape[1], affine=True).cuda()
                        xg = x0.detach().clone().requires_grad_()
                        def fn():
                            torch.autograd.backward(norm(xg), dy)
                    try:  # a case that fails (e.g. in capture) costs its row, not the rest of the run
                        t = bench(fn)
                        res[name].append((t, graph_us(fn, t)))
                    except Exception as error:
                        print(f"{case} {dtype} {text} {name} FAILED: {str(error).splitlines()[0][:200]}", flush=True)
                        res[name].append((float("nan"), float("nan")))
            base = mods[0][0]
            cells = []
            for name, _ in mods:
                db = statistics.median(r[0] for r in res[name]); gr = statistics.median(r[1] for r in res[name])
                cells.append(f"{name} {db:.2f}/{gr:.2f}")
            rel = " ".join(f"{n}/{base} {statistics.median(r[0] for r in res[n]) / statistics.median(r[0] for r in res[base]):.3f}/"
                           f"{statistics.median(r[1] for r in res[n]) / statistics.median(r[1] for r in res[base]):.3f}" for n, _ in mods[1:])
            spread = " ".join(f"{n}:[" + ",".join(f"{r[0]:.2f}/{r[1]:.2f}" for r in res[n]) + "]" for n, _ in mods)
            print(f"{case} {dtype} {a.layout} {text} floor {statistics.median(floor):.2f} | " + " | ".join(cells) + f" | {rel} || {spread}", flush=True)
        del x0, dy, out
        torch.cuda.empty_cache()
