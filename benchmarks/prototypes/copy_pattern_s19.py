# Does the apply's access pattern (each CTA streams its own contiguous span) cost DRAM bandwidth
# against a copy whose CTAs walk the tensor together (grid-interleaved blocks)? Triton, fp32 7.5 GB.
import torch, triton, triton.language as tl
from triton.testing import do_bench

@triton.jit
def span_copy(x, y, per_prog, total, BLOCK: tl.constexpr, CS: tl.constexpr):
    pid = tl.program_id(0)
    start = pid.to(tl.int64) * per_prog
    end = tl.minimum(start + per_prog, total)
    for off in range(start, end, BLOCK):
        idx = off + tl.arange(0, BLOCK)
        v = tl.load(x + idx, mask=idx < end)
        if CS:
            tl.store(y + idx, v, mask=idx < end, cache_modifier=".cs")
        else:
            tl.store(y + idx, v, mask=idx < end)

@triton.jit
def inter_copy(x, y, nblocks, total, BLOCK: tl.constexpr, CS: tl.constexpr):
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    for b in range(pid, nblocks, nprog):
        idx = b.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        v = tl.load(x + idx, mask=idx < total)
        if CS:
            tl.store(y + idx, v, mask=idx < total, cache_modifier=".cs")
        else:
            tl.store(y + idx, v, mask=idx < total)

for dtype in (torch.float32, torch.bfloat16):
    x = torch.randn(112, 64, 512, 512, device="cuda", dtype=dtype)
    y = torch.empty_like(x)
    total = x.numel()
    BLOCK = 8192 if dtype == torch.float32 else 16384
    nblocks = triton.cdiv(total, BLOCK)
    res = {"torch copy_": do_bench(lambda: y.copy_(x), warmup=5, rep=60)}
    for grid in (1056, 264, 2112, 4224):
        per = triton.cdiv(nblocks, grid) * BLOCK
        for cs in (0, 1):
            res[f"span grid={grid} cs={cs}"] = do_bench(lambda: span_copy[(grid,)](x, y, per, total, BLOCK=BLOCK, CS=cs, num_warps=8), warmup=5, rep=60)
            res[f"inter grid={grid} cs={cs}"] = do_bench(lambda: inter_copy[(grid,)](x, y, nblocks, total, BLOCK=BLOCK, CS=cs, num_warps=8), warmup=5, rep=60)
    assert torch.equal(x, y)
    for k, v in res.items():
        print(f"{str(dtype):16s} {k:28s} {v:8.3f} ms  {2 * x.numel() * x.element_size() / v / 1e9:6.3f} TB/s")
    del x, y
