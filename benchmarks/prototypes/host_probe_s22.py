"""Where an isolated eager call's time goes, per shape: isolated (sync, event, call, event, sync)
median of 40; the host-side duration of the call alone (perf_counter, no sync inside); the kernels
one call launches and their device durations (torch.profiler)."""
import statistics, sys, time, torch, torch.nn.functional as F
sys.path.insert(0, ".")
import instance_norm as inm
from torch.profiler import profile, ProfilerActivity
inm.load_extension()
def isolated(fn, n=40):
    ts = []
    for _ in range(n + 5):
        torch.cuda.synchronize(); a = torch.cuda.Event(enable_timing=True); b = torch.cuda.Event(enable_timing=True)
        a.record(); fn(); b.record(); torch.cuda.synchronize(); ts.append(a.elapsed_time(b) * 1e3)
    return statistics.median(ts[5:])
def host(fn, n=200):
    ts = []
    for _ in range(n):
        torch.cuda.synchronize(); t = time.perf_counter(); fn(); ts.append((time.perf_counter() - t) * 1e6)
    return statistics.median(ts)
for shape in [(3, 5, 127, 129), (4, 128, 128, 128), (64, 256, 7, 7), (8, 512, 32, 32), (32, 3, 224, 224)]:
    for dtype in (torch.float32, torch.bfloat16):
        x = torch.randn(shape, device="cuda", dtype=dtype)
        m = inm.ModelNew(shape[1]).cuda()
        def ours():
            with torch.no_grad(): m(x)
        def gn():
            with torch.no_grad(): F.group_norm(x, shape[1])
        ours(); gn()
        plan = inm.chosen_plan(x)
        line = f"{str(dtype)[6:]} {shape} plan {plan}: isolated ours {isolated(ours):.1f} gn {isolated(gn):.1f} us | host-only ours {host(ours):.1f} gn {host(gn):.1f} us"
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(20):
                ours(); torch.cuda.synchronize()
        ks = {}
        for e in prof.events():
            if e.device_type == torch.autograd.DeviceType.CUDA:
                ks.setdefault(e.name[:60], []).append(e.device_time_total if hasattr(e, "device_time_total") else e.cuda_time_total)
        line += " | kernels: " + "; ".join(f"{k} x{len(v)} {statistics.median(v):.1f}us" for k, v in ks.items())
        print(line, flush=True)
import triton
for dtype in (torch.float32, torch.bfloat16):
    x = torch.randn(3, 5, 127, 129, device="cuda", dtype=dtype)
    res = []
    for plan in inm.candidate_plans(x, tight=True):
        t = triton.testing.do_bench(lambda: inm.forward_with_plan(x, None, None, 1e-5, plan), warmup=10, rep=60, return_mode="median") * 1e3
        res.append((t, str(plan)))
    res.sort()
    cp = triton.testing.do_bench(lambda: torch.empty_like(x).copy_(x), warmup=10, rep=60, return_mode="median") * 1e3
    print(f"{dtype} (3,5,127,129) chosen {inm.chosen_plan(x)} copy {cp:.2f} us; best plans:", "; ".join(f"{p} {t:.2f}" for t, p in res[:8]), flush=True)
