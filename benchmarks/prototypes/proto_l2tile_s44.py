"""Fortieth session, for the next (issue 11; Triton, no build of ours unless --ours): how close can a channels-last
instance norm that reads x twice get to the copy when the second read is served from the L2?

Our channels-last forward at (112,64,512,512) reads x twice (statistics, then the element map) and took 1.51x the
copy in float32 and 1.52-1.63x in bfloat16 (README, fifteenth session); a two-read path's floor is 1.5x. A sample's
slab (64 channels x 512 x 512) is 32 MB in bfloat16 and 64 MB in float32, against the H200's L2 of about 50 MB.
Taken one sample at a time, statistics then map, the map could find a bfloat16 sample (and part of a float32 one)
still in the L2. This times that schedule in Triton, each sample two launches (statistics with float32 atomics
into per-sample sums zeroed once; the map computing its coefficients from them), the whole sequence captured in
one CUDA graph (device time, no host gaps), against a copy of the same bytes in the same run:
  - order: the map's CTAs in the statistics' order, or reversed (the last rows read first);
  - hints: evict_last on the statistics' loads and evict_first on the map's, or none;
  - rows a statistics CTA (its share of the sample) and rows a map CTA.
Not deterministic (atomics): a measurement of the schedule's floor, not a kernel to ship. With --ncu, one sample
per kernel for Nsight Compute (dram__bytes_read.sum tells how much of the map's read came from DRAM).
usage: python proto_l2tile_s44.py [--dtypes float32,bfloat16] [--shape 112x64x512x512] [--ours] [--ncu]"""
import argparse
import statistics
import torch
import triton
import triton.language as tl
from triton.testing import do_bench

ap = argparse.ArgumentParser()
ap.add_argument("--dtypes", default="bfloat16,float32")
ap.add_argument("--shape", default="112x64x512x512")
ap.add_argument("--ours", action="store_true", help="also time instance_norm.ModelNew on the same input")
ap.add_argument("--ncu", action="store_true", help="one sample's two kernels, for ncu, then exit")
ap.add_argument("--nchw", action="store_true", help="contiguous input, an instance at a time (e.g. 1x2x4096x4096)")
args = ap.parse_args()
N0, C0, H, W = map(int, args.shape.split("x"))
NCHW = args.nchw
# The kernels see `N` slabs of HW rows of C columns: NHWC samples, or (--nchw) instances of H * W elements as rows
# of 64 (H * W a multiple of 64), COUNT elements an instance.
N, C, HW = (N0 * C0, 64, H * W // 64) if NCHW else (N0, C0, H * W)
COUNT = H * W
assert not NCHW or (H * W) % 64 == 0
EPS = 1e-5


@triton.jit
def stats_kernel(x, sums, rows_per_cta, HW, C: tl.constexpr, ROWS: tl.constexpr, EVICT_LAST: tl.constexpr):
    # CTA p adds rows [p * rows_per_cta, (p + 1) * rows_per_cta) of one sample (HW rows of C channels, NHWC),
    # then atomically adds its per-channel sum and sum of squares into sums[0:C], sums[C:2C].
    pid = tl.program_id(0)
    c = tl.arange(0, C)
    start = pid * rows_per_cta
    acc = tl.zeros([ROWS, C], tl.float32)
    acc2 = tl.zeros([ROWS, C], tl.float32)
    for r0 in range(0, rows_per_cta, ROWS):
        r = start + r0 + tl.arange(0, ROWS)
        m = (r < HW)[:, None] & ((r0 + tl.arange(0, ROWS)) < rows_per_cta)[:, None]
        off = r[:, None].to(tl.int64) * C + c[None, :]
        if EVICT_LAST:
            v = tl.load(x + off, mask=m, other=0.0, eviction_policy="evict_last").to(tl.float32)
        else:
            v = tl.load(x + off, mask=m, other=0.0).to(tl.float32)
        acc += v
        acc2 += v * v
    tl.atomic_add(sums + c, tl.sum(acc, 0))
    tl.atomic_add(sums + C + c, tl.sum(acc2, 0))


@triton.jit
def map_kernel(x, y, sums, HW, count, eps, C: tl.constexpr, ROWS: tl.constexpr, REVERSE: tl.constexpr,
               EVICT_FIRST: tl.constexpr, ALL: tl.constexpr):
    # ALL: one instance laid out as HW rows of C columns (NCHW, --nchw): the C column sums are one instance's.
    pid = tl.program_id(0)
    if REVERSE:
        pid = tl.num_programs(0) - 1 - pid
    c = tl.arange(0, C)
    s = tl.load(sums + c)
    s2 = tl.load(sums + C + c)
    if ALL:
        s = tl.zeros([C], tl.float32) + tl.sum(s, 0)
        s2 = tl.zeros([C], tl.float32) + tl.sum(s2, 0)
    mean = s / count
    var = tl.maximum(s2 / count - mean * mean, 0.0)
    a = 1.0 / tl.sqrt(var + eps)
    b = -mean * a
    r = pid * ROWS + tl.arange(0, ROWS)
    m = (r < HW)[:, None]
    off = r[:, None].to(tl.int64) * C + c[None, :]
    if EVICT_FIRST:
        v = tl.load(x + off, mask=m, other=0.0, eviction_policy="evict_first").to(tl.float32)
    else:
        v = tl.load(x + off, mask=m, other=0.0).to(tl.float32)
    tl.store(y + off, (v * a[None, :] + b[None, :]).to(y.dtype.element_ty), mask=m)


def schedule(x, y, sums, stat_ctas, stat_rows, map_rows, reverse, hints, samples=None):
    rows_per_cta = triton.cdiv(HW, stat_ctas)
    sums.zero_()
    for n in range(N if samples is None else samples):
        xn, yn, sn = x[n], y[n], sums[n]
        stats_kernel[(stat_ctas,)](xn, sn, rows_per_cta, HW, C=C, ROWS=stat_rows, EVICT_LAST=hints, num_warps=4)
        map_kernel[(triton.cdiv(HW, map_rows),)](xn, yn, sn, HW, COUNT, EPS, C=C, ROWS=map_rows, REVERSE=reverse,
                                                 EVICT_FIRST=hints, ALL=NCHW, num_warps=4)


def graph_time(fn, reps=5):
    """Median ms of one replay of a graph holding one call of fn (captured after a warm-up call)."""
    fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        with torch.cuda.graph(g, stream=s):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    times = []
    for _ in range(reps + 1):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times[1:])


print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}, "
      f"L2 {torch.cuda.get_device_properties(0).L2_cache_size / 2**20:.0f} MB, shape ({N0},{C0},{H},{W}) "
      f"{'contiguous, an instance at a time' if NCHW else 'channels_last, a sample at a time'}",
      flush=True)
for dname in args.dtypes.split(","):
    dtype = getattr(torch, dname)
    if NCHW:
        x = torch.randn(N0, C0, H, W, device="cuda", dtype=dtype) * 2 + 1
        xs = x.view(N, HW, C)  # instance n: HW rows of 64
    else:
        x = (torch.randn(N0, C0, H, W, device="cuda", dtype=dtype) * 2 + 1).contiguous(memory_format=torch.channels_last)
        xs = x.permute(0, 2, 3, 1)  # (N, H, W, C) view over the same memory: x[n] is one sample's NHWC slab
    assert xs.is_contiguous()
    y = torch.full_like(xs, float("nan"))
    sums = torch.zeros(N, 2 * C, device="cuda", dtype=torch.float32)
    if args.ncu:
        schedule(xs, y, sums, 512, 32, 16, True, True, samples=2)
        torch.cuda.synchronize()
        continue
    slab = C * HW * x.element_size() / 2**20  # a sample's (an instance's with --nchw)
    copy_out = torch.empty_like(xs)
    copy_bench = do_bench(lambda: copy_out.copy_(xs), warmup=5, rep=60)
    copy_graph = graph_time(lambda: copy_out.copy_(xs))
    print(f"\n{dname}: a sample's slab {slab:.0f} MB; copy {copy_bench:.3f} ms (do_bench, L2 flushed), "
          f"{copy_graph:.3f} ms (graph replay)", flush=True)
    ref = None
    for stat_ctas, stat_rows, map_rows in ((512, 32, 16), (264, 32, 16), (1024, 16, 16), (512, 32, 32)):
        for reverse in (False, True):
            for hints in (False, True):
                fn = lambda: schedule(xs, y, sums, stat_ctas, stat_rows, map_rows, reverse, hints)
                y.fill_(float("nan"))
                fn()
                torch.cuda.synchronize()
                if ref is None:  # float64 statistics of a few samples' instances, the map in float32
                    k = min(N, 4)
                    xd = xs[:k].double()
                    dims = tuple(range(1, xd.dim())) if NCHW else tuple(range(1, xd.dim() - 1))
                    mu = xd.mean(dim=dims, keepdim=True)
                    var = xd.var(dim=dims, unbiased=False, keepdim=True)
                    ref = ((xd - mu) / torch.sqrt(var + EPS)).float()
                err = ((y[:min(N, 4)].float() - ref).norm() / ref.norm()).item()
                bad = torch.isnan(y).any().item()
                t = graph_time(fn)
                print(f"  stat_ctas {stat_ctas:5d} stat_rows {stat_rows:3d} map_rows {map_rows:3d} "
                      f"reverse {int(reverse)} hints {int(hints)}: {t:.3f} ms graph = {t / copy_graph:.3f}x the copy's graph, "
                      f"{t / copy_bench:.3f}x its do_bench "
                      f"(rel err {err:.1e}{', NaN left' if bad else ''})", flush=True)
    if args.ours:
        import instance_norm as inm
        inm.load_extension()
        m = inm.ModelNew(C0).cuda()
        with torch.no_grad():
            t_b = do_bench(lambda: m(x), warmup=5, rep=60)
            t_g = graph_time(lambda: m(x))
        print(f"  ModelNew ({'contiguous' if NCHW else 'channels_last'} in, out): {t_b:.3f} ms do_bench = {t_b / copy_bench:.3f}x, "
              f"{t_g:.3f} ms graph = {t_g / copy_graph:.3f}x copy", flush=True)
    del x, xs, y, copy_out, ref
    torch.cuda.empty_cache()
