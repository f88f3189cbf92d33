#!/usr/bin/env python3
"""Step-0 probes for the one-read channels-last design (benchmarks/DESIGN_channels_last.md, section 6).

    python benchmarks/prototypes/cl_probe.py [--out DIR]

Nothing here is part of the product; each probe answers one question the grid-team kernel depends on,
on the device at hand, every time against a contiguous copy of the same bytes in the same run
(triton.testing.do_bench median, L2 flushed; device time):
1. Column copy: can a persistent grid that walks (n, channel group) tiles of a channels-last tensor,
   each CTA moving its rows' Cg * 4-byte segments, stream at the copy's rate? Cg * 4 in {16, 32, 64,
   128, 256} bytes, tiles in order g fastest (the next group's sectors follow one tile later) or n
   fastest, one 512-thread CTA per SM with 64 KB in flight (the team kernel's shape). The design's
   gate: >= 95% of the copy's bandwidth at 32 bytes.
2. Grid exchange: the round trip of a grid-wide arrive (red.release.gpu) and wait (ld.acquire.gpu
   poll) over every CTA of a cooperative launch, per round; the gate: < 5 us.
3. L2 retention: time to re-read X MiB right after reading it, alone and with a Y MiB write in between,
   against reading it cold: how much of a tile the second pass finds in L2 (sizes the hybrid plan).
Output: probe.json and probe.md in --out (default benchmarks/results).
"""

import argparse
import datetime
import json
import os

import torch
from torch.utils.cpp_extension import load_inline

CUDA = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>
#include <cuda_runtime.h>

// x, out: (N, M, C) float32. Tile t = (n, g) covers channels [g * Cg, (g + 1) * Cg) of every row of
// sample n; CTA b moves rows [b * M / B, (b + 1) * M / B) of every tile, tiles in order (g_fastest:
// t = n * G + g, else t = g * N + n). 8 16-byte vectors in flight per thread.
__global__ void __launch_bounds__(512) column_copy_kernel(const float4* __restrict__ x, float4* __restrict__ out,
                                                          long N, long M, int C, int Cg, bool g_fastest) {
  const int per_row = Cg / 4;
  const int G = C / Cg;
  const long rows = (M + gridDim.x - 1) / gridDim.x;
  const long r0 = blockIdx.x * rows;
  const long r1 = min(M, r0 + rows);
  const long items = (r1 > r0 ? r1 - r0 : 0) * per_row;
  for (long t = 0; t < N * G; ++t) {
    const long n = g_fastest ? t / G : t % N;
    const long g = g_fastest ? t % G : t / N;
    const long base = (n * M * C + g * Cg) / 4;
    // blockDim.x is a multiple of per_row, so a thread's column within the row segment is fixed and
    // its k-th item lies blockDim.x / per_row rows further: one division per 8 items.
    const int col = threadIdx.x % per_row;
    const long row_step = blockDim.x / per_row;
    for (long i0 = threadIdx.x; i0 < items; i0 += 8L * blockDim.x) {
      float4 v[8];
      long at[8];
      const long row0 = i0 / per_row;
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        const long i = i0 + long(k) * blockDim.x;
        at[k] = i < items ? base + (r0 + row0 + k * row_step) * (C / 4) + col : -1;
        if (at[k] >= 0) v[k] = __ldcs(x + at[k]);
      }
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        if (at[k] >= 0) __stcs(out + at[k], v[k]);
      }
    }
  }
}

void column_copy(torch::Tensor x, torch::Tensor out, int64_t C, int64_t Cg, bool g_fastest, int64_t grid) {
  const long N = x.size(0);
  const long M = x.numel() / (N * C);
  column_copy_kernel<<<grid, 512, 0, c10::cuda::getCurrentCUDAStream()>>>(
      reinterpret_cast<const float4*>(x.data_ptr<float>()), reinterpret_cast<float4*>(out.data_ptr<float>()), N, M,
      int(C), int(Cg), g_fastest);
}

// `rounds` grid-wide exchanges: thread 0 of every CTA adds 1 (release), then polls (acquire) until
// every CTA of the round has arrived; the CTA's other threads wait at the barrier.
__global__ void exchange_kernel(unsigned* counter, int rounds) {
  for (int r = 0; r < rounds; ++r) {
    __syncthreads();
    if (threadIdx.x == 0) {
      asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(counter) : "memory");
      const unsigned target = unsigned(r + 1) * gridDim.x;
      unsigned seen = 0;
      long spins = 0;
      do {  // bounded: a bug traps instead of hanging the device
        asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(seen) : "l"(counter) : "memory");
        if (++spins > (1L << 24)) __trap();
      } while (seen < target);
    }
    __syncthreads();
  }
}

void exchange(torch::Tensor counter, int64_t rounds, int64_t grid, int64_t block) {
  unsigned* c = reinterpret_cast<unsigned*>(counter.data_ptr<int>());
  int r = int(rounds);
  void* args[] = {&c, &r};
  // A cooperative launch guarantees every CTA is resident, so the poll cannot wait on an unscheduled CTA.
  C10_CUDA_CHECK(cudaLaunchCooperativeKernel(reinterpret_cast<void*>(exchange_kernel), dim3(grid), dim3(block), args, 0,
                                             c10::cuda::getCurrentCUDAStream()));
}
"""

CPP = """
void column_copy(torch::Tensor x, torch::Tensor out, int64_t C, int64_t Cg, bool g_fastest, int64_t grid);
void exchange(torch::Tensor counter, int64_t rounds, int64_t grid, int64_t block);
"""


def bench(fn):
    from triton.testing import do_bench

    return do_bench(fn, warmup=10, rep=100, return_mode="median")


def event_ms(fn):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(1_000_000)  # the GPU is busy while the host launches: the events time the kernels only
    start.record()
    fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "results"))
    args = p.parse_args()
    mod = load_inline("cl_probe", cpp_sources=CPP, cuda_sources=CUDA, functions=["column_copy", "exchange"],
                      extra_cuda_cflags=["-O3"], verbose=False)
    props = torch.cuda.get_device_properties(0)
    sms = props.multi_processor_count
    meta = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}
    lines = [f"# Step-0 probes: {meta['device']}, torch {meta['torch']}, {meta['date']}", ""]
    result = {"meta": meta}

    # 1. Column copy on the main shape (fp32, channels_last: N=112, M=512*512, C=64).
    n, c, m = 112, 64, 512 * 512
    x = torch.randn(n, m, c, device="cuda")
    out = torch.empty_like(x)
    copy = bench(lambda: out.copy_(x))
    gbs = 2 * x.numel() * 4 / copy / 1e6
    lines += ["## 1. Column copy, (112, 512*512, 64) fp32", "",
              f"Contiguous copy: {copy:.3f} ms ({gbs:.0f} GB/s).", "",
              "| Cg * 4 bytes | order | grid | ms | x copy | correct |", "|---:|---|---:|---:|---:|---|"]
    rows = []
    for cg in (4, 8, 16, 32, 64):
        for g_fastest in (True, False):
            for grid in (sms,):  # one 512-thread CTA per SM, as the team kernel (88 registers: one fits)
                out.zero_()
                mod.column_copy(x, out, c, cg, g_fastest, grid)
                ok = torch.equal(out, x)
                ms = bench(lambda: mod.column_copy(x, out, c, cg, g_fastest, grid))
                rows.append({"bytes": cg * 4, "g_fastest": g_fastest, "grid": grid, "ms": ms, "x_copy": ms / copy, "ok": ok})
                lines.append(f"| {cg * 4} | {'g fastest' if g_fastest else 'n fastest'} | {grid} | {ms:.3f} | "
                             f"{ms / copy:.3f} | {ok} |")
    result["column_copy"] = {"copy_ms": copy, "rows": rows}
    del x, out

    # 2. Grid exchange round trip (cooperative launch, one CTA of 512 threads per SM, then two).
    lines += ["", "## 2. Grid exchange (red.release.gpu + ld.acquire.gpu poll), per round", "",
              "The 1000-round figure is the one to read (launch cost amortized).", "",
              "| CTAs | rounds | us per round |", "|---:|---:|---:|"]
    ex = []
    for grid in (sms, 2 * sms):
        for rounds in (100, 1000):
            counter = torch.zeros(1, dtype=torch.int32, device="cuda")
            mod.exchange(counter, rounds, grid, 512)  # warm
            counter.zero_()
            ms = event_ms(lambda: mod.exchange(counter, rounds, grid, 512))
            ex.append({"ctas": grid, "rounds": rounds, "us_per_round": 1000 * ms / rounds})
            lines.append(f"| {grid} | {rounds} | {1000 * ms / rounds:.2f} |")
    result["exchange"] = ex

    # 3. L2 retention: re-read X MiB right after reading it (alone, or with Y MiB written in between).
    lines += ["", "## 3. L2 retention: a re-read of X MiB against a cold read", "",
              "| X MiB | written between, MiB | cold ms | re-read ms | re-read / cold |", "|---:|---:|---:|---:|---:|"]
    flush = torch.empty(512 * 2**20, dtype=torch.uint8, device="cuda")
    l2 = []
    for x_mib in (8, 16, 24, 32, 48, 64):
        for y_mib in (0, 8, 32):
            a = torch.empty(x_mib * 2**18, device="cuda")
            a.normal_()
            b = torch.empty(max(y_mib, 1) * 2**18, device="cuda")
            sink = torch.empty((), device="cuda")
            cold, warm = [], []
            for _ in range(5):
                flush.zero_()
                torch.cuda.synchronize()
                cold.append(event_ms(lambda: torch.sum(a, dim=0, out=sink)))
                if y_mib:
                    b.zero_()
                warm.append(event_ms(lambda: torch.sum(a, dim=0, out=sink)))
            cold_ms, warm_ms = sorted(cold)[2], sorted(warm)[2]
            l2.append({"x_mib": x_mib, "y_mib": y_mib, "cold_ms": cold_ms, "reread_ms": warm_ms})
            lines.append(f"| {x_mib} | {y_mib} | {cold_ms:.4f} | {warm_ms:.4f} | {warm_ms / cold_ms:.2f} |")
    result["l2"] = l2
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "probe.json"), "w") as f:
        json.dump(result, f, indent=1)
    with open(os.path.join(args.out, "probe.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
