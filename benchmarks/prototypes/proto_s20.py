# Session 20 prototypes (Triton, no build):
# (a) channels-last apply with per-(n,c) coefficient arrays, one-shot CTAs of R rows x C, fp32/bf16,
#     against the copy: does a coefficient-array apply run at the copy's rate?
# (b) two-read norm at (1,2,4096,4096): evict_last on the read sweep's tail, reversed map sweep
#     (evict_first loads/stores), against the copy; block sizes; with and without a persisting-L2 limit.
import ctypes, sys
import torch, triton, triton.language as tl
from triton.testing import do_bench

def b(fn): return do_bench(fn, warmup=5, rep=40)

@triton.jit
def cl_apply(x, y, scale, shift, total, HWC, C: tl.constexpr, ROWS: tl.constexpr, LEAKY: tl.constexpr):
    BLOCK: tl.constexpr = ROWS * C
    idx = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    m = idx < total
    n = idx // HWC
    c = idx % C
    k = n * C + c
    v = tl.load(x + idx, mask=m).to(tl.float32)
    a = tl.load(scale + k, mask=m)
    s = tl.load(shift + k, mask=m)
    o = v * a + s
    if LEAKY:
        o = tl.where(o > 0, o, o * 0.01)
    tl.store(y + idx, o.to(y.dtype.element_ty), mask=m)

@triton.jit
def cl_apply_2d(x, y, scale, shift, HW, C: tl.constexpr, ROWS: tl.constexpr):
    # grid (row blocks, n): n from the grid, coefficients one vector per column
    rb = tl.program_id(0)
    n = tl.program_id(1).to(tl.int64)
    r = rb * ROWS + tl.arange(0, ROWS)
    c = tl.arange(0, C)
    a = tl.load(scale + n * C + c)
    s = tl.load(shift + n * C + c)
    off = n * HW * C + r[:, None].to(tl.int64) * C + c[None, :]
    m = r[:, None] < HW
    v = tl.load(x + off, mask=m).to(tl.float32)
    tl.store(y + off, (v * a[None, :] + s[None, :]).to(y.dtype.element_ty), mask=m)

@triton.jit
def oneshot(x, y, total, BLOCK: tl.constexpr):
    idx = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y + idx, tl.load(x + idx, mask=idx < total), mask=idx < total)

print("== (a) channels-last apply with coefficient arrays", flush=True)
for dtype in (torch.float32, torch.bfloat16):
    for shape in ((112, 64, 512, 512), (16, 64, 256, 256), (4, 128, 128, 128)):
        N, C, H, W = shape
        x = torch.randn(shape, device="cuda", dtype=dtype).to(memory_format=torch.channels_last)
        y = torch.empty_like(x); t = x.numel()
        sc = torch.randn(N * C, device="cuda"); sh = torch.randn(N * C, device="cuda")
        cp = b(lambda: y.copy_(x))
        ref = (x.float() * sc.view(N, C, 1, 1) + sh.view(N, C, 1, 1)).to(dtype)
        res = [f"copy {cp * 1e3:.1f} us"]
        for ROWS in (8, 16, 32, 64):
            BLOCK = ROWS * C
            nb = triton.cdiv(t, BLOCK)
            for w in (4,) if BLOCK <= 4096 else (4, 8):
                f = lambda: cl_apply[(nb,)](x, y, sc, sh, t, H * W * C, C=C, ROWS=ROWS, LEAKY=False, num_warps=w)
                f(); torch.cuda.synchronize()
                ok = torch.allclose(y.float(), ref.float(), atol=1e-2, rtol=1e-2)
                res.append(f"R{ROWS}w{w}={b(f) / cp:.3f}{'' if ok else '!BAD'}")
            f2 = lambda: cl_apply_2d[(triton.cdiv(H * W, ROWS), N)](x, y, sc, sh, H * W, C=C, ROWS=ROWS, num_warps=4)
            res.append(f"2d{ROWS}={b(f2) / cp:.3f}")
        nb = triton.cdiv(t, 2048)
        res.append(f"leakyR32={b(lambda: cl_apply[(triton.cdiv(t, 32 * C),)](x, y, sc, sh, t, H * W * C, C=C, ROWS=32, LEAKY=True, num_warps=4)) / cp:.3f}")
        print(f"{str(dtype)[6:]} {shape}: " + " ".join(res), flush=True)
        del x, y, ref

@triton.jit
def partial_sum(x, part, total, tail_start, BLOCK: tl.constexpr, EL: tl.constexpr):
    pid = tl.program_id(0)
    idx = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    if EL:
        if pid >= tail_start:
            v = tl.load(x + idx, mask=idx < total, other=0.0, eviction_policy="evict_last").to(tl.float32)
        else:
            v = tl.load(x + idx, mask=idx < total, other=0.0, eviction_policy="evict_first").to(tl.float32)
    else:
        v = tl.load(x + idx, mask=idx < total, other=0.0).to(tl.float32)
    tl.store(part + pid, tl.sum(v, 0) + tl.sum(v * v, 0))

@triton.jit
def scale_rev(x, y, part, total, EF: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.num_programs(0) - 1 - tl.program_id(0)
    idx = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    a = tl.load(part)
    if EF:
        v = tl.load(x + idx, mask=idx < total, eviction_policy="evict_first").to(tl.float32)
        tl.store(y + idx, (v * 1.0001 + a * 1e-30).to(y.dtype.element_ty), mask=idx < total, eviction_policy="evict_first")
    else:
        v = tl.load(x + idx, mask=idx < total).to(tl.float32)
        tl.store(y + idx, (v * 1.0001 + a * 1e-30).to(y.dtype.element_ty), mask=idx < total)

def set_persist(nbytes):
    for name in ("libcudart.so.13", "libcudart.so.12", "libcudart.so"):
        try:
            rt = ctypes.CDLL(name); break
        except OSError:
            rt = None
    if rt is None: return "no libcudart"
    rc = rt.cudaDeviceSetLimit(ctypes.c_int(6), ctypes.c_size_t(nbytes))  # cudaLimitPersistingL2CacheSize
    v = ctypes.c_size_t(0); rt.cudaDeviceGetLimit(ctypes.byref(v), ctypes.c_int(6))
    return f"setlimit rc={rc} now={v.value}"

print("== (b) two-read floor with evict_last tails", torch.cuda.get_device_properties(0).L2_cache_size if hasattr(torch.cuda.get_device_properties(0), 'L2_cache_size') else '', flush=True)
for persist in (0, 1):
    if persist: print(set_persist(40 << 20), flush=True)
    for dtype in (torch.float32, torch.bfloat16):
        for shape in ((1, 2, 4096, 4096), (16, 64, 256, 256)):
            x = torch.randn(shape, device="cuda", dtype=dtype); y = torch.empty_like(x); t = x.numel()
            nbytes = t * x.element_size()
            cp = b(lambda: y.copy_(x))
            res = [f"copy {cp * 1e3:.1f} us"]
            for B in (4096, 16384):
                nb = triton.cdiv(t, B); part = torch.empty(nb, device="cuda")
                blk = B * x.element_size()
                for tail_mb in ((0, 16, 24, 32, 40) if B == 4096 else (0, 32)):
                    for ef in (0, 1):
                        if tail_mb == 0 and ef == 1: continue
                        tail_blocks = min(nb, (tail_mb << 20) // blk)
                        def run():
                            partial_sum[(nb,)](x, part, t, nb - tail_blocks, BLOCK=B, EL=tail_mb > 0, num_warps=4 if B == 4096 else 8)
                            scale_rev[(nb,)](x, y, part, t, EF=ef, BLOCK=B, num_warps=4 if B == 4096 else 8)
                        res.append(f"B{B}t{tail_mb}e{ef}={b(run) / cp:.3f}")
            print(f"persist={persist} {str(dtype)[6:]} {shape} {nbytes / 1e6:.0f} MB " + " ".join(res), flush=True)
            del x, y
