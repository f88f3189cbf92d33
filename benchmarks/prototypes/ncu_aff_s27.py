"""s27: one affine backward of ModelNew from a given file, bracketed by cudaProfilerStart/Stop.
usage: python ncu_aff.py path N C H W dtype"""
import sys, importlib.util, torch
path, n, c, h, w, dtype = sys.argv[1], *map(int, sys.argv[2:6]), getattr(torch, sys.argv[6])
spec = importlib.util.spec_from_file_location("m_" + str(abs(hash(path))), path)
m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m); m.load_extension()
x = torch.randn(n, c, h, w, device="cuda", dtype=dtype, requires_grad=True)
dy = torch.randn(n, c, h, w, device="cuda", dtype=dtype)
norm = m.ModelNew(c, affine=True).cuda()
y = norm(x)
for _ in range(5):
    torch.autograd.grad(y, [x, norm.weight, norm.bias], dy, retain_graph=True)
torch.cuda.synchronize()
torch.cuda.profiler.start()
torch.autograd.grad(y, [x, norm.weight, norm.bias], dy, retain_graph=True)
torch.cuda.synchronize()
torch.cuda.profiler.stop()
