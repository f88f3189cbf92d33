"""Per-kernel device times (torch.profiler, CUDA activity) of the forward (plain, affine) and the training step
(affine) for several instance_norm.py files, eager, after warm-up (thirty-fourth session: which kernel grows
in the training step at (1024,256,4,4) when the forward runs the rows rather than the span path).
usage: python prof_train_s38.py name=path ... [--shapes 1024x256x4x4] [--dtypes float32,bfloat16] [--iters 30]"""
import argparse, collections, importlib.util, sys
import torch
from torch.profiler import ProfilerActivity, profile

def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    m = importlib.util.module_from_spec(spec); sys.modules[name] = m
    spec.loader.exec_module(m); m.load_extension()
    return m

ap = argparse.ArgumentParser()
ap.add_argument("files", nargs="+")
ap.add_argument("--shapes", default="1024x256x4x4")
ap.add_argument("--dtypes", default="float32,bfloat16")
ap.add_argument("--iters", type=int, default=30)
a = ap.parse_args()
mods = [(f.split("=")[0], load(f.split("=")[1], "in_" + f.split("=")[0])) for f in a.files]
for text in a.shapes.split(","):
    shape = tuple(int(v) for v in text.split("x"))
    for dtype in a.dtypes.split(","):
        x0 = torch.randn(shape, device="cuda", dtype=getattr(torch, dtype)); dy = torch.randn_like(x0)
        for case in ("fwd", "fwdaff", "train"):
            for name, m in mods:
                norm = m.ModelNew(shape[1], affine=case != "fwd").cuda()
                xg = x0.detach().clone().requires_grad_()
                def fn():
                    if case == "train":
                        torch.autograd.backward(norm(xg), dy)
                    else:
                        with torch.no_grad(): norm(x0)
                for _ in range(5): fn()
                torch.cuda.synchronize()
                with profile(activities=[ProfilerActivity.CUDA]) as prof:
                    for _ in range(a.iters): fn()
                    torch.cuda.synchronize()
                times = collections.defaultdict(list)
                for e in prof.events():
                    if e.device_type == torch.autograd.DeviceType.CUDA:
                        times[e.name[:90]].append(e.time_range.elapsed_us())
                total = sum(sum(v) for v in times.values()) / a.iters
                print(f"{case} {dtype} {text} {name}: {total:.2f} us of kernels a call", flush=True)
                for k, v in sorted(times.items(), key=lambda kv: -sum(kv[1])):
                    print(f"    {len(v) / a.iters:.0f}x {sum(v) / len(v):8.2f} us  {k}", flush=True)
        del x0, dy
        torch.cuda.empty_cache()
