"""A/B/n: device time of several instance_norm.py files in one process, channels_last (and 3d).
usage: python abn.py name=path [name=path ...] [--shapes main,quick] [--dtypes float32,bfloat16]"""
import argparse, importlib.util, sys, os, time
import torch, triton
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "benchmarks"))
from shapes import parse_shapes

def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    m = importlib.util.module_from_spec(spec); sys.modules[name] = m
    t = time.time(); spec.loader.exec_module(m); m.load_extension()
    print(f"{name}: {path} loaded in {time.time() - t:.1f} s", flush=True)
    return m

def bench(fn):
    return triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median") * 1e3

ap = argparse.ArgumentParser()
ap.add_argument("files", nargs="+")
ap.add_argument("--shapes", default="main,quick")
ap.add_argument("--dtypes", default="float32,bfloat16")
ap.add_argument("--no-backward", action="store_true")
ap.add_argument("--eval", action="store_true")
ap.add_argument("--compile", action="store_true")
ap.add_argument("--contiguous", action="store_true", help="NCHW input instead of channels_last (added in the sixteenth session)")
a = ap.parse_args()
mods = [(f.split("=")[0], load(f.split("=")[1], "in_" + f.split("=")[0])) for f in a.files]
items = [t for t in a.shapes.split(",") if t != "3d"]
shapes = (parse_shapes(",".join(items)) if items else []) + ([(2, 32, 128, 128, 128)] if "3d" in a.shapes.split(",") else [])
for shape in shapes:
    for dtype in a.dtypes.split(","):
        x = torch.randn(shape, device="cuda", dtype=getattr(torch, dtype))
        if not a.contiguous:
            x = x.contiguous(memory_format=torch.channels_last if x.dim() == 4 else torch.channels_last_3d)
        out = torch.empty_like(x)
        dy = torch.randn_like(x)
        row = {"copy": bench(lambda: out.copy_(x))}
        ref = None
        with torch.no_grad():
            for name, m in mods:
                norm = (m.ModelNew if len(shape) == 4 else m.InstanceNorm3d)(shape[1]).cuda()
                row[name] = bench(lambda: norm(x))
                y = norm(x)
                if ref is None: ref = y
                else: assert torch.equal(y, ref) or (y.float() - ref.float()).abs().max().item() < 1e-3, name
            for name, m in mods:
                f = m.InstanceNormAct2d(shape[1], activation="leaky_relu").cuda() if x.dim() == 4 else None
                if f is not None: row[name + "_leaky"] = bench(lambda: f(x))
        if a.compile and tuple(shape) == (112, 64, 512, 512):
            import torch.nn as nn
            ref_mod = (nn.InstanceNorm2d if x.dim() == 4 else nn.InstanceNorm3d)(shape[1]).cuda()
            comp = torch.compile(ref_mod)
            with torch.no_grad():
                for _ in range(3): comp(x)
                row["compile"] = bench(lambda: comp(x))
            torch._dynamo.reset()
        base = mods[0][0]
        cells = " ".join(f"{k}={v:.1f}" for k, v in row.items())
        rel = " ".join(f"{n}/{base}={row[n] / row[base]:.3f}" for n, _ in mods[1:])
        print(f"fwd {dtype} {tuple(shape)} {mods[-1][1].chosen_plan(x)}: {cells} us | {rel} | {mods[-1][0]}/copy={row[mods[-1][0]] / row['copy']:.3f}", flush=True)
        if not a.no_backward:
            row = {"add": bench(lambda: torch.add(x, dy, out=out))}
            for name, m in mods:
                norm = (m.ModelNew if len(shape) == 4 else m.InstanceNorm3d)(shape[1], affine=True).cuda()
                xg = x.detach().requires_grad_()
                y = norm(xg)
                row[name] = bench(lambda: torch.autograd.grad(y, xg, dy, retain_graph=True))
            cells = " ".join(f"{k}={v:.1f}" for k, v in row.items())
            rel = " ".join(f"{n}/{base}={row[n] / row[base]:.3f}" for n, _ in mods[1:])
            print(f"bwd {dtype} {tuple(shape)}: {cells} us | {rel}", flush=True)
        if a.eval:
            row = {"copy": bench(lambda: out.copy_(x))}
            with torch.no_grad():
                for name, m in mods:
                    norm = (m.ModelNew if len(shape) == 4 else m.InstanceNorm3d)(shape[1], affine=True, track_running_stats=True).cuda().eval()
                    row[name] = bench(lambda: norm(x))
            cells = " ".join(f"{k}={v:.1f}" for k, v in row.items())
            rel = " ".join(f"{n}/{base}={row[n] / row[base]:.3f}" for n, _ in mods[1:])
            print(f"eval {dtype} {tuple(shape)}: {cells} us | {rel}", flush=True)
        del x, dy, out
