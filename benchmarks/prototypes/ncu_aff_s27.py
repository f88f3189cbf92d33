"""Twenty-third session: one backward of ModelNew from a given file (affine, or plain with a trailing
`plain`), bracketed by cudaProfilerStart/Stop for ncu --profile-from-start off.
usage: python ncu_aff_s27.py path N C H W dtype [plain]"""
import sys, importlib.util, torch
path, n, c, h, w, dtype = sys.argv[1], *map(int, sys.argv[2:6]), getattr(torch, sys.argv[6])
affine = not (len(sys.argv) > 7 and sys.argv[7] == "plain")
spec = importlib.util.spec_from_file_location("m_" + str(abs(hash(path))), path)
m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m); m.load_extension()
x = torch.randn(n, c, h, w, device="cuda", dtype=dtype, requires_grad=True)
dy = torch.randn(n, c, h, w, device="cuda", dtype=dtype)
norm = m.ModelNew(c, affine=affine).cuda()
wrt = [x, norm.weight, norm.bias] if affine else [x]
y = norm(x)
for _ in range(5):
    torch.autograd.grad(y, wrt, dy, retain_graph=True)
torch.cuda.synchronize()
torch.cuda.profiler.start()
torch.autograd.grad(y, wrt, dy, retain_graph=True)
torch.cuda.synchronize()
torch.cuda.profiler.stop()
