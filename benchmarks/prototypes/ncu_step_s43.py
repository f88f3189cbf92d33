"""Thirty-ninth session, for the next: one affine training step of ModelNew (forward, backward, the affine
gradients' channel sums), bracketed by cudaProfilerStart/Stop for ncu --profile-from-start off, at tiny instances
where the per-instance statistics (mean, rstd: 8 bytes an instance in float) and the backward's per-instance sums
(8 more) are as large as half of x in float32 at 2x2: how many bytes each kernel moves (dram__bytes_read/write)
and at what rate. The AccumulateGrad adds are left out (x is not a leaf that accumulates: torch.autograd.grad).
usage: python ncu_step_s43.py N C H W dtype"""
import sys, torch
n, c, h, w, dtype = *map(int, sys.argv[1:5]), getattr(torch, sys.argv[5])
import instance_norm as inm
inm.load_extension()
m = inm.ModelNew(c, affine=True).cuda().to(dtype)
x = torch.randn(n, c, h, w, device="cuda", dtype=dtype, requires_grad=True)
dy = torch.randn(n, c, h, w, device="cuda", dtype=dtype)
params = [x, m.weight, m.bias]
for _ in range(5):
    torch.autograd.grad(m(x), params, dy)
torch.cuda.synchronize()
torch.cuda.profiler.start()
torch.autograd.grad(m(x), params, dy)
torch.cuda.synchronize()
torch.cuda.profiler.stop()
