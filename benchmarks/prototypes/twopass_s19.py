# (a) bf16: one-shot vs persistent copies (main shape); (b) a two-read norm's floor with L2 reuse:
# (1,2,4096,4096) read sweep then map sweep (forward or reversed order), against the copy.
import torch, triton, triton.language as tl
from triton.testing import do_bench

@triton.jit
def oneshot(x, y, total, BLOCK: tl.constexpr):
    idx = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y + idx, tl.load(x + idx, mask=idx < total), mask=idx < total)

@triton.jit
def inter_loop(x, y, nblocks, total, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    for b in range(pid, nblocks, tl.num_programs(0)):
        idx = b.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        tl.store(y + idx, tl.load(x + idx, mask=idx < total), mask=idx < total)

@triton.jit
def partial_sum(x, part, total, BLOCK: tl.constexpr, REV: tl.constexpr):
    pid = tl.program_id(0)
    if REV:
        pid = tl.num_programs(0) - 1 - pid
    idx = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    v = tl.load(x + idx, mask=idx < total, other=0.0).to(tl.float32)
    tl.store(part + pid, tl.sum(v, 0) + tl.sum(v * v, 0))

@triton.jit
def scale(x, y, part, total, BLOCK: tl.constexpr, REV: tl.constexpr):
    pid = tl.program_id(0)
    if REV:
        pid = tl.num_programs(0) - 1 - pid
    idx = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    a = tl.load(part)
    v = tl.load(x + idx, mask=idx < total).to(tl.float32)
    tl.store(y + idx, (v * 1.0001 + a * 1e-30).to(y.dtype.element_ty), mask=idx < total)

def b(fn): return do_bench(fn, warmup=5, rep=40)
x = torch.randn(112, 64, 512, 512, device="cuda", dtype=torch.bfloat16); y = torch.empty_like(x); t = x.numel()
print(f"bf16 main: copy_ {b(lambda: y.copy_(x)):.3f} ms", flush=True)
for B, w in ((2048, 4), (4096, 4), (8192, 8)):
    nb = triton.cdiv(t, B)
    print(f"  oneshot B={B} w={w} {b(lambda: oneshot[(nb,)](x, y, t, BLOCK=B, num_warps=w)):.3f} ms"
          f"  persistent g=1056 {b(lambda: inter_loop[(1056,)](x, y, nb, t, BLOCK=B, num_warps=w)):.3f} ms", flush=True)
del x, y
for dtype in (torch.float32, torch.bfloat16):
    for shape in ((1, 2, 4096, 4096), (1, 1, 8192, 8192), (16, 64, 256, 256)):
        x = torch.randn(shape, device="cuda", dtype=dtype); y = torch.empty_like(x); t = x.numel()
        B = 4096; nb = triton.cdiv(t, B); part = torch.empty(nb, device="cuda")
        cp = b(lambda: y.copy_(x))
        r = {}
        for r1 in (0, 1):
            for r2 in (0, 1):
                def run():
                    partial_sum[(nb,)](x, part, t, BLOCK=B, REV=r1, num_warps=4)
                    scale[(nb,)](x, y, part, t, BLOCK=B, REV=r2, num_warps=4)
                r[f"p{r1}s{r2}"] = b(run)
        r["read"] = b(lambda: partial_sum[(nb,)](x, part, t, BLOCK=B, REV=0, num_warps=4))
        print(f"{str(dtype)[6:]} {shape} {x.numel() * x.element_size() / 1e6:.0f} MB copy {cp * 1e3:.1f} us | " +
              " ".join(f"{k}={v * 1e3:.1f} ({v / cp:.2f}x)" for k, v in r.items()), flush=True)
        del x, y
