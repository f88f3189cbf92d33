# Device time of the channels-last backward at small shapes: the sum of the CUDA kernels' durations per
# call under torch.profiler (autograd.grad of the module, affine), old vs new, and torch.add as the floor.
import importlib.util, sys, torch
from torch.profiler import profile, ProfilerActivity
def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path); m = importlib.util.module_from_spec(spec)
    sys.modules[name] = m; spec.loader.exec_module(m); m.load_extension(); return m
mods = [(a.split("=")[0], load(a.split("=")[1], "g_" + a.split("=")[0])) for a in sys.argv[1:]]
def kernel_us(fn, calls=30):
    for _ in range(5): fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls): fn()
        torch.cuda.synchronize()
    evs = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    names = {}
    import re
    for e in evs:
        m = re.search(r"(\w+_kernel|copy|add|fill|elementwise)", e.name)
        k = m.group(1) if m else e.name[:30]
        names[k] = names.get(k, 0) + e.device_time / calls
    return sum(e.device_time for e in evs) / calls, names
for shape in ((4, 128, 128, 128), (16, 64, 256, 256), (1, 2, 4096, 4096)):
    for dtype in (torch.float32, torch.bfloat16):
        x = torch.randn(shape, device="cuda", dtype=dtype)
        if shape[1] > 2: x = x.contiguous(memory_format=torch.channels_last)
        dy = torch.randn_like(x); out = torch.empty_like(x)
        res = [f"add={kernel_us(lambda: torch.add(x, dy, out=out))[0]:.2f} copy={kernel_us(lambda: out.copy_(x))[0]:.2f}"]
        detail = []
        for name, m in mods:
            norm = m.ModelNew(shape[1], affine=True).cuda()
            xg = x.detach().requires_grad_()
            y = norm(xg)
            t, names = kernel_us(lambda: torch.autograd.grad(y, xg, dy, retain_graph=True))
            with torch.no_grad():
                tf, nf = kernel_us(lambda: norm(x))
            res.append(f"{name}={t:.2f} fwd_{name}={tf:.2f}")
            names.update({"fwd " + k: v for k, v in nf.items()})
            detail.append(f"  {name}: " + ", ".join(f"{k} {v:.2f}" for k, v in names.items()))
        print(f"bwd kernels {str(dtype)[6:]} {shape} {mods[-1][1].chosen_plan(x)}: " + " ".join(res) + " us per call", flush=True)
        print("\n".join(detail), flush=True)
