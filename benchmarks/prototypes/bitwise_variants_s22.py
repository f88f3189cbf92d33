"""Bitwise check of variant instance_norm.py files against a base one (same sums in the same order),
plus the base against float64: forward (training, no running stats), training step dx/dw/db, and
the running-stats forward. usage: python bitwise.py base=path name=path ..."""
import importlib.util, sys, torch
def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path); m = importlib.util.module_from_spec(spec)
    sys.modules[name] = m; spec.loader.exec_module(m); m.load_extension(); return m
mods = [(a.split("=")[0], load(a.split("=")[1], "bw_" + a.split("=")[0])) for a in sys.argv[1:]]
bad = 0
for shape in [(1, 2, 4096, 4096), (2, 4, 2048, 2048), (1, 3, 2047, 2049)]:
    for dtype in (torch.float32, torch.bfloat16):
        x = (torch.randn(shape, device="cuda") * 2 + 1).to(dtype).requires_grad_()
        dy = torch.randn(shape, device="cuda").to(dtype)
        outs = {}
        for name, m in mods:
            torch.manual_seed(0)
            mod = m.ModelNew(shape[1], affine=True).cuda().to(dtype)
            with torch.no_grad():
                mod.weight.uniform_(0.5, 1.5); mod.bias.uniform_(-0.5, 0.5)
            y = mod(x); g = torch.autograd.grad(y, (x, mod.weight, mod.bias), dy)
            rs = m.ModelNew(shape[1], track_running_stats=True).cuda()
            yr = rs(x.detach()); rs.eval(); ye = rs(x.detach())
            outs[name] = [y.detach().clone()] + [t.clone() for t in g] + [yr, ye, rs.running_mean.clone(), rs.running_var.clone()]
        ref = torch.nn.functional.instance_norm(x.detach().double())
        base = outs[mods[0][0]]
        err = ((base[4].double() - ref).norm() / ref.norm()).item()
        print(f"{shape} {dtype}: base vs float64 rel {err:.2e}", flush=True)
        for name in outs:
            same = all(torch.equal(a, b) for a, b in zip(outs[name], base))
            bad += not same
            print(f"   {name}: bitwise {'same' if same else 'DIFFERENT'}", flush=True)
print("bitwise bad:", bad)
