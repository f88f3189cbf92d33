"""Twenty-first session, for the next: one backward (no affine), bracketed by cudaProfilerStart/Stop for
ncu --profile-from-start off (process-wide; the first version's NVTX range on this thread missed the
kernels, which autograd launches from its device thread), ours (ModelNew through autograd) or
torch.compile's (nn.InstanceNorm2d).
usage: python ncu_bwd_s26.py ours|compile N C H W dtype"""
import sys, torch, torch.nn as nn
impl, n, c, h, w, dtype = sys.argv[1], *map(int, sys.argv[2:6]), getattr(torch, sys.argv[6])
x = torch.randn(n, c, h, w, device="cuda", dtype=dtype, requires_grad=True)
dy = torch.randn(n, c, h, w, device="cuda", dtype=dtype)
if impl == "ours":
    import instance_norm as inm
    inm.load_extension()
    m = inm.ModelNew(c).cuda()
else:
    m = torch.compile(nn.InstanceNorm2d(c).cuda())
y = m(x)
for _ in range(5):
    torch.autograd.grad(y, x, dy, retain_graph=True)
torch.cuda.synchronize()
torch.cuda.profiler.start()
torch.autograd.grad(y, x, dy, retain_graph=True)
torch.cuda.synchronize()
torch.cuda.profiler.stop()
