"""Nineteenth session: one forward (no grad) inside an NVTX range "measure", for ncu --nvtx-include.
usage: python ncu_small_s23.py ours|compile N C H W dtype"""
import sys, torch, torch.nn as nn
impl, n, c, h, w, dtype = sys.argv[1], *map(int, sys.argv[2:6]), getattr(torch, sys.argv[6])
x = torch.randn(n, c, h, w, device="cuda", dtype=dtype)
if impl == "ours":
    import instance_norm as inm
    inm.load_extension()
    m = inm.ModelNew(c).cuda()
else:
    m = torch.compile(nn.InstanceNorm2d(c).cuda())
with torch.no_grad():
    for _ in range(5): m(x)
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_push("measure")
    m(x)
    torch.cuda.nvtx.range_pop()
    torch.cuda.synchronize()
