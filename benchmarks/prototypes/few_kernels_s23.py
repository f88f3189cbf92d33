"""Nineteenth session: where the device time goes at few-instance shapes, ours against Inductor.
Per kernel device time under torch.profiler (no launch gaps), forward no grad, and the graph-replay
time per call. usage: python few_kernels_s23.py"""
import re, statistics, torch, torch.nn as nn
from torch.profiler import profile, ProfilerActivity
import instance_norm as inm
inm.load_extension()

def kernels(fn, calls=50):
    for _ in range(5): fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls): fn()
        torch.cuda.synchronize()
    out = {}
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            out[e.name[:70]] = out.get(e.name[:70], 0) + e.device_time / calls
    return out

def graph_us(fn, calls=100):
    s = torch.cuda.Stream(); s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3): fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(calls): fn()
    g.replay(); torch.cuda.synchronize()
    ts = []
    for _ in range(7):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); g.replay(); b.record(); torch.cuda.synchronize(); ts.append(a.elapsed_time(b) / calls * 1e3)
    return statistics.median(ts)

for shape in ((1, 16, 64, 64), (1, 4, 256, 256), (1, 1, 512, 512), (8, 512, 32, 32)):
    for dtype in (torch.float32, torch.bfloat16):
        x = torch.randn(shape, device="cuda", dtype=dtype); out = torch.empty_like(x)
        ours = inm.ModelNew(shape[1]).cuda()
        comp = torch.compile(nn.InstanceNorm2d(shape[1]).cuda())
        with torch.no_grad():
            comp(x)
            rows = {"copy": lambda: out.copy_(x), "ours": lambda: ours(x), "compile": lambda: comp(x)}
            line = []
            for name, fn in rows.items():
                ks = kernels(fn)
                line.append(f"{name}: graph {graph_us(fn):.2f} us; kernels " + "; ".join(f"{k} {v:.2f}" for k, v in ks.items()))
        print(f"== {str(dtype)[6:]} {shape} plan {inm.chosen_plan(x)}")
        print("\n".join("   " + l for l in line), flush=True)
        torch._dynamo.reset()
