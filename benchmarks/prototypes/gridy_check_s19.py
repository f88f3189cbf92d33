# The apply's grid-stride over units (kMaxGridY = 3 in w_gy3.py) gives bitwise the main file's results.
import importlib.util, sys, torch
def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path); m = importlib.util.module_from_spec(spec)
    sys.modules[name] = m; spec.loader.exec_module(m); return m
a = load("instance_norm.py", "in_main"); b = load(".scratch/s19/w_gy3.py", "in_gy3")
for dtype in (torch.float32, torch.bfloat16):
    for shape in ((16, 64, 256, 256), (5, 96, 120, 130), (7, 200, 64, 64)):
        x = torch.randn(shape, device="cuda", dtype=dtype).contiguous(memory_format=torch.channels_last) * 3 + 1
        dy = torch.randn_like(x)
        outs = []
        for m in (a, b):
            torch.manual_seed(0)
            norm = m.ModelNew(shape[1], affine=True, track_running_stats=True).cuda()
            with torch.no_grad(): norm.weight.normal_(); norm.bias.normal_()
            xg = x.detach().requires_grad_()
            y = norm(xg); y.backward(dy)
            norm.eval()
            with torch.no_grad(): ye = norm(x)
            fused = m.InstanceNormAct2d(shape[1], activation="gelu").cuda()
            with torch.no_grad(): yf = fused(x, residual=dy)
            outs.append((y, xg.grad, norm.weight.grad, ye, yf, a.chosen_plan(x)))
        same = all(torch.equal(u, v) for u, v in zip(outs[0][:5], outs[1][:5]))
        print(dtype, shape, outs[0][5], "bitwise equal" if same else "DIFFERENT", flush=True)
        assert same
