"""Drop-in CUDA replacement for ``torch.nn.InstanceNorm2d``.

``ModelNew`` takes ``nn.InstanceNorm2d``'s arguments, parameters and buffers; on CUDA tensors its
forward and backward run the kernels below (registered as ``torch.library`` custom ops, so
``torch.compile`` and CUDA graphs see them); CPU tensors, and eval mode with running statistics
(a per-channel affine map, not a normalization), go to PyTorch.

Each (n, c) plane of H*W elements is one *instance*. An instance norm needs one read and one write
of every element, so every kernel but multi_cta holds an instance on chip between its reduction
and its output. Which kernel serves a shape depends on the instance's size (numbers for float32;
bf16/fp16 hold twice the elements in the same bytes):

* ``onchip``, a warp per instance (H*W up to 1024): several instances per CTA, warp-shuffle merges.
* ``onchip``, a CTA per instance (up to 32K elements, 128 KB), copied into shared memory by cp.async.
* ``stream`` (sm_90), instances of one to 16 CTAs' worth whose bytes are a multiple of 16 (the main
  shape, 512x512 fp32, is 1 MiB): a persistent grid of clusters, each CTA owning a fixed slice of
  every instance its cluster takes. The bulk copy engine loads the next instances' slices into a
  ring of shared-memory buffers and writes the normalized output back out, so no thread waits on
  memory; partial statistics travel to the cluster's peers by st.async, one instance ahead of the
  normalization, with no cluster barrier. One read and one write per element: 1.04x the copy time.
* ``cluster``, 8 CTAs per instance through distributed shared memory (sm_90): instances of up to
  four CTAs' worth that the stream kernel does not take (H*W * element size not a multiple of 16).
* ``multi_cta``, everything larger, float64, or no clusters (sm_80): partial statistics per 64 KB
  chunk, a per-instance merge, then a normalize pass that reads the input again (reverse chunk
  order, so the part still in L2 goes first).

The backward uses the same regimes (the stream kernel holds x and dy: one stage for 1 MiB fp32).

Statistics are exact centered ones: each thread computes a corrected two-pass mean and M2 over the
values it holds, and partial results merge with Chan's formula (no E[x^2] - E[x]^2 cancellation;
constant instances give exactly zero). Accumulation is in float32 (float64 for float64 input) in a
fixed order, so results are bitwise reproducible. Instances that do not start or end on a 16-byte
boundary hand their few edge elements to one thread; everything else moves in 16-byte vectors.

The C++ is two translation units built in parallel (cold build about 20 s): the kernels, compiled
by nvcc without ATen headers, and the host side (plan choice, checks, operator registration),
compiled by the C++ compiler alone; a small interface of plain types joins them.
"""

import hashlib
import inspect
import os
import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F

_INTERFACE = r"""
// =====================================================================================
// Interface between the kernel translation unit (CUDA, no ATen) and the host one (ATen)
// =====================================================================================
#include <cstdint>
#include <cuda_runtime_api.h>

namespace INSTANCE_NORM_NS {

inline constexpr int kWarpSize = 32;
inline constexpr int kMaxBlock = 1024;
inline constexpr int kBackwardMaxBlock = 512;  // two held tensors' addressing needs more than 64 registers
inline constexpr int kMaxCluster = 16;
inline constexpr int kStreamThreads = 512;
inline constexpr int kStreamVectors = 8;       // V: a stream CTA's slice is up to 512 * 8 vectors (64 KB)
inline constexpr int kStreamMaxStages = 4;
inline constexpr int kChunkThreads = 512;       // multi_cta: a chunk is 512 threads x 8 vectors
inline constexpr int kChunkVectorsPerThread = 8;

enum class DType : int { kFloat, kHalf, kBFloat16, kDouble };
enum class Pass : int { kForward, kBackward };

// Which kernel serves a call: cluster_size 0 is multi_cta; stages > 0 the stream kernel; otherwise
// the on-chip kernel with K vectors per thread, G threads per instance, CS CTAs per instance.
struct Plan {
  int cluster_size;
  int vectors_per_thread;   // K (V for stream plans)
  int threads_per_instance; // G
  int stages = 0;
};

// One call's tensors as raw pointers. Forward: x -> out (y), stats. Backward: x, dy, stats -> out
// (dx), sums. weight and bias are accumulation-type vectors of C, or null.
struct Problem {
  DType dtype;
  const void* x;
  const void* dy;
  void* out;
  const void* weight;
  const void* bias;
  void* stats;
  void* sums;
  int64_t num_instances;
  int64_t instance_size;
  int64_t channels;
  double eps;
};

// Grid, block and dynamic shared memory the host chose for an on-chip or stream plan.
struct Launch {
  unsigned grid;
  int block;
  int smem;
  int slice_vectors;  // stream plans: one CTA's slice of an instance
};

// Defined in the kernel translation unit.
const void* kernel_for(DType dtype, Pass pass, const Plan& plan);  // null: no such kernel
int64_t chunks_per_instance(DType dtype, int64_t instance_size);   // multi_cta chunks
int64_t chunk_partial_bytes(DType dtype, Pass pass);               // multi_cta workspace per chunk
cudaError_t launch_kernel(const Plan& plan, Pass pass, const Problem& problem, const Launch& launch,
                          void* workspace, cudaStream_t stream);

}  // namespace INSTANCE_NORM_NS
"""

_KERNEL_SOURCE = r"""
// =====================================================================================
// Shared helpers
// =====================================================================================
#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace cg = cooperative_groups;

namespace INSTANCE_NORM_NS {
namespace {

constexpr unsigned kFullMask = 0xffffffffu;

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define IN_HAS_CLUSTERS 1
#else
#define IN_HAS_CLUSTERS 0
#endif

// A 16-byte vector stays packed in a uint4 so that 8 halves cost 4 registers, not 8.
__device__ __forceinline__ unsigned int word_of(const uint4& u, int i) {
  return i == 0 ? u.x : i == 1 ? u.y : i == 2 ? u.z : u.w;
}
__device__ __forceinline__ unsigned int& word_of(uint4& u, int i) {
  return i == 0 ? u.x : i == 1 ? u.y : i == 2 ? u.z : u.w;
}

// Element access per storage type: acc is the accumulation type, kVec elements per 16 bytes.
template <typename T> struct Elem;

template <> struct Elem<float> {
  using acc = float;
  static constexpr int kVec = 4;
  __device__ static float to_acc(float v) { return v; }
  __device__ static float from_acc(float v) { return v; }
  __device__ static float get(const uint4& u, int j) { return __uint_as_float(word_of(u, j)); }
  __device__ static void load_one(uint4& u, int j, const float* p) {
    word_of(u, j) = __float_as_uint(__ldcs(p));
  }
  __device__ static void store_one(float* p, float v) { __stcs(p, v); }
  __device__ static uint4 pack(const float* v) {
    return make_uint4(__float_as_uint(v[0]), __float_as_uint(v[1]), __float_as_uint(v[2]),
                      __float_as_uint(v[3]));
  }
};

template <typename Half> struct Elem16 {
  using acc = float;
  static constexpr int kVec = 8;
  __device__ static unsigned short bits(const uint4& u, int j) {
    return static_cast<unsigned short>(word_of(u, j >> 1) >> ((j & 1) * 16));
  }
  __device__ static void load_one(uint4& u, int j, const Half* p) {
    unsigned int b = __ldcs(reinterpret_cast<const unsigned short*>(p));
    unsigned int& w = word_of(u, j >> 1);
    w = (j & 1) ? ((w & 0x0000ffffu) | (b << 16)) : ((w & 0xffff0000u) | b);
  }
};

template <> struct Elem<__half> : Elem16<__half> {
  __device__ static float to_acc(__half v) { return __half2float(v); }
  __device__ static __half from_acc(float v) { return __float2half_rn(v); }
  __device__ static float get(const uint4& u, int j) { return __half2float(__ushort_as_half(bits(u, j))); }
  __device__ static void store_one(__half* p, float v) {
    __stcs(reinterpret_cast<unsigned short*>(p), __half_as_ushort(__float2half_rn(v)));
  }
  __device__ static uint4 pack(const float* v) {
    uint4 u;
    for (int i = 0; i < 4; ++i) {
      __half2 h = __floats2half2_rn(v[2 * i], v[2 * i + 1]);
      word_of(u, i) = *reinterpret_cast<unsigned int*>(&h);
    }
    return u;
  }
};

template <> struct Elem<__nv_bfloat16> : Elem16<__nv_bfloat16> {
  __device__ static float to_acc(__nv_bfloat16 v) { return __bfloat162float(v); }
  __device__ static __nv_bfloat16 from_acc(float v) { return __float2bfloat16_rn(v); }
  __device__ static float get(const uint4& u, int j) {
    return __bfloat162float(__ushort_as_bfloat16(bits(u, j)));
  }
  __device__ static void store_one(__nv_bfloat16* p, float v) {
    __stcs(reinterpret_cast<unsigned short*>(p), __bfloat16_as_ushort(__float2bfloat16_rn(v)));
  }
  __device__ static uint4 pack(const float* v) {
    uint4 u;
    for (int i = 0; i < 4; ++i) {
      __nv_bfloat162 h = __floats2bfloat162_rn(v[2 * i], v[2 * i + 1]);
      word_of(u, i) = *reinterpret_cast<unsigned int*>(&h);
    }
    return u;
  }
};

template <> struct Elem<double> {
  using acc = double;
  static constexpr int kVec = 2;
  __device__ static double to_acc(double v) { return v; }
  __device__ static double from_acc(double v) { return v; }
  __device__ static double get(const uint4& u, int j) {
    return __hiloint2double(static_cast<int>(word_of(u, 2 * j + 1)), static_cast<int>(word_of(u, 2 * j)));
  }
  __device__ static void load_one(uint4& u, int j, const double* p) {
    double v = __ldcs(p);
    word_of(u, 2 * j) = static_cast<unsigned int>(__double2loint(v));
    word_of(u, 2 * j + 1) = static_cast<unsigned int>(__double2hiint(v));
  }
  __device__ static void store_one(double* p, double v) { __stcs(p, v); }
  __device__ static uint4 pack(const double* v) {
    return make_uint4(static_cast<unsigned int>(__double2loint(v[0])), static_cast<unsigned int>(__double2hiint(v[0])),
                      static_cast<unsigned int>(__double2loint(v[1])), static_cast<unsigned int>(__double2hiint(v[1])));
  }
};

// (mean, M2, count) of a set of values; M2 is the sum of squared deviations from the mean.
template <typename acc_t> struct Stats {
  acc_t mean, m2, n;
};

// Chan et al.'s pairwise merge: exact for constant data and free of cancellation.
template <typename acc_t>
__device__ __forceinline__ Stats<acc_t> merge(const Stats<acc_t>& a, const Stats<acc_t>& b) {
  const acc_t n = a.n + b.n;
  // Merging two empty partials divides 0 by 1, not 0 by 0, which would take the division's slow path.
  const acc_t wb = b.n / (n > acc_t(1) ? n : acc_t(1));
  const acc_t delta = b.mean - a.mean;
  return {a.mean + delta * wb, a.m2 + b.m2 + delta * delta * a.n * wb, n};
}

// Backward partials: plain sums.
template <typename acc_t> struct Sums {
  acc_t a, b;  // sum(dy), sum(dy * (x - mean))
};

// One combine per partial type, so that every reduction below serves the forward's statistics and
// the backward's sums alike. A value-initialized partial (P{}) is the empty one.
template <typename acc_t>
__device__ __forceinline__ Stats<acc_t> combine(const Stats<acc_t>& a, const Stats<acc_t>& b) { return merge(a, b); }
template <typename acc_t>
__device__ __forceinline__ Sums<acc_t> combine(const Sums<acc_t>& a, const Sums<acc_t>& b) {
  return {a.a + b.a, a.b + b.b};
}
template <typename acc_t>
__device__ __forceinline__ Stats<acc_t> shfl_xor(const Stats<acc_t>& s, int offset) {
  return {__shfl_xor_sync(kFullMask, s.mean, offset), __shfl_xor_sync(kFullMask, s.m2, offset),
          __shfl_xor_sync(kFullMask, s.n, offset)};
}
template <typename acc_t>
__device__ __forceinline__ Sums<acc_t> shfl_xor(const Sums<acc_t>& s, int offset) {
  return {__shfl_xor_sync(kFullMask, s.a, offset), __shfl_xor_sync(kFullMask, s.b, offset)};
}

// Butterfly reduction across the warp. Both partners combine (lower lane, upper lane) in that
// order, so every lane ends with bitwise the same result.
template <typename P>
__device__ __forceinline__ P warp_reduce(P s) {
  const int lane = threadIdx.x & (kWarpSize - 1);
#pragma unroll
  for (int offset = 1; offset < kWarpSize; offset <<= 1) {
    const P other = shfl_xor(s, offset);
    s = (lane & offset) ? combine(other, s) : combine(s, other);
  }
  return s;
}

// Reduces each thread's partial over its group of G threads (a warp up to the whole CTA) and, with
// a cluster, over the cluster's CTAs through distributed shared memory; every thread of the group
// ends with the instance's result. The CTA's cta_partial stays readable by its peers until
// cluster_release(), which each kernel calls after its last global store.
template <typename P>
__device__ __forceinline__ P instance_reduce(P s, P* warp_partials, P* cta_partial, int G, int group,
                                             int cluster_size) {
  const int lane = threadIdx.x & (kWarpSize - 1);
  s = warp_reduce(s);
  if (G > kWarpSize) {  // every warp of the group reads the group's warp results and reduces them
    if (lane == 0) warp_partials[threadIdx.x / kWarpSize] = s;
    __syncthreads();
    const int warps_per_group = G / kWarpSize;
    s = warp_reduce(lane < warps_per_group ? warp_partials[group * warps_per_group + lane] : P{});
  }
  if (cluster_size > 1) {
#if IN_HAS_CLUSTERS
    cg::cluster_group cluster = cg::this_cluster();
    if (threadIdx.x == 0) *cta_partial = s;
    cluster.sync();
    s = warp_reduce(lane < cluster_size ? *cluster.map_shared_rank(cta_partial, lane) : P{});
    cluster.barrier_arrive();  // our reads are done; peers may exit once everyone has arrived
#else
    __trap();
#endif
  }
  return s;
}

__device__ __forceinline__ void cluster_release(int cluster_size) {
#if IN_HAS_CLUSTERS
  if (cluster_size > 1) cg::this_cluster().barrier_wait();
#endif
}

// A CTA-wide reduction for the multi_cta chunk kernels; the result is valid in thread 0.
template <typename P, int kThreads>
__device__ __forceinline__ P cta_reduce(P s) {
  __shared__ P warp_partials[kThreads / kWarpSize];
  const int lane = threadIdx.x & (kWarpSize - 1);
  const int warp = threadIdx.x / kWarpSize;
  s = warp_reduce(s);
  if (lane == 0) warp_partials[warp] = s;
  __syncthreads();
  if (warp == 0) s = warp_reduce(lane < kThreads / kWarpSize ? warp_partials[lane] : P{});
  __syncthreads();  // warp_partials may be reused by the caller's next iteration
  return s;
}

// One warp combines an instance's chunk partials in a fixed order; every lane gets the result.
template <typename P>
__device__ __forceinline__ P reduce_chunks(const P* partials, int64_t count) {
  P s{};
  for (int64_t c = threadIdx.x & (kWarpSize - 1); c < count; c += kWarpSize) s = combine(s, partials[c]);
  return warp_reduce(s);
}

// An instance's elements split into whole 16-byte vectors, handled by every thread from registers,
// and at most 2 * (kVec - 1) boundary elements [0, head_end) and [tail_begin, size) when the
// instance does not start or end on a vector boundary, handled by one thread with scalar accesses.
// Keeping masks off the per-element path is what keeps K = 8 vectors within 64 registers.
struct Boundary {
  int head_count;      // elements [0, head_count)
  int tail_count;      // elements [tail_begin, tail_begin + tail_count)
  int64_t tail_begin;
  __device__ int count() const { return head_count + tail_count; }
  __device__ int64_t at(int i) const { return i < head_count ? i : tail_begin + (i - head_count); }
};

template <typename T>
__device__ __forceinline__ Boundary boundary_of(int64_t size, int head) {
  constexpr int kVec = Elem<T>::kVec;
  const int head_count = head ? static_cast<int>(min(int64_t(kVec - head), size)) : 0;
  const int64_t tail_begin = head_count + ((size - head_count) / kVec) * kVec;
  return {head_count, static_cast<int>(size - tail_begin), tail_begin};
}

template <typename T>
__device__ __forceinline__ typename Elem<T>::acc scalar_at(const T* x, int64_t i) {
  return Elem<T>::to_acc(x[i]);
}

// Corrected two-pass statistics of the boundary elements (few; read through the cache twice).
template <typename T>
__device__ __forceinline__ Stats<typename Elem<T>::acc> boundary_stats(const T* x, Boundary b) {
  using acc_t = typename Elem<T>::acc;
  const int count = b.count();
  if (count == 0) return {acc_t(0), acc_t(0), acc_t(0)};
  acc_t sum = 0;
#pragma unroll 1
  for (int i = 0; i < count; ++i) sum += scalar_at(x, b.at(i));
  const acc_t n = static_cast<acc_t>(count);
  const acc_t mean0 = sum / n;
  acc_t d = 0, q = 0;
#pragma unroll 1
  for (int i = 0; i < count; ++i) {
    const acc_t v = scalar_at(x, b.at(i)) - mean0;
    d += v;
    q += v * v;
  }
  const acc_t m2 = q - d * d / n;
  return {mean0 + d / n, m2 > acc_t(0) ? m2 : acc_t(0), n};
}

template <typename T>
__device__ __forceinline__ void store_boundary(const T* x, T* y, Boundary b, typename Elem<T>::acc mean,
                               typename Elem<T>::acc scale, typename Elem<T>::acc shift) {
#pragma unroll 1
  for (int i = 0; i < b.count(); ++i) {
    const int64_t at = b.at(i);
    y[at] = Elem<T>::from_acc((scalar_at(x, at) - mean) * scale + shift);
  }
}

// The k-th of a thread's K vectors starts at element first + k * stride of `base` (a 16-byte
// aligned position); it is used when it lies wholly inside [lo, hi).
template <typename T, int K>
__device__ __forceinline__ void load_whole_vectors(uint4 (&raw)[K], const T* base, int first, int stride, int lo,
                                                   int hi) {
  constexpr int kVec = Elem<T>::kVec;
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int e = first + k * stride;
    raw[k] = (e >= lo && e + kVec <= hi) ? __ldcs(reinterpret_cast<const uint4*>(base + e)) : make_uint4(0, 0, 0, 0);
  }
}

// A thread's K vectors in shared memory: vector k at base[k * step]. Reads go to shared memory at
// each use, so the held data costs no registers and K * G is bounded by shared memory instead.
struct SharedVectors {
  const uint4* base;
  int step;
  __device__ __forceinline__ uint4 operator[](int k) const { return base[k * step]; }
};

// Copies a thread's whole vectors global -> shared with cp.async (16 bytes each, no registers);
// vectors outside [lo, hi) are zero-filled. Each thread later reads only what it copied, so waiting
// for its own copies is enough.
template <typename T, int K>
__device__ __forceinline__ void copy_whole_vectors_async(uint4* held, int step, const T* base, int first,
                                                         int stride, int lo, int hi) {
  constexpr int kVec = Elem<T>::kVec;
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int e = first + k * stride;
    const bool whole = e >= lo && e + kVec <= hi;
    const T* src = whole ? base + e : base;
    const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(held + k * step));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(whole ? 16 : 0)
                 : "memory");
  }
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}

__device__ __forceinline__ void wait_async_copies() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }

// Corrected two-pass statistics of the whole vectors a thread holds.
template <typename T, int K, typename Vectors>
__device__ __forceinline__ Stats<typename Elem<T>::acc> thread_stats(const Vectors& raw, int first, int stride,
                                                                      int lo, int hi) {
  using acc_t = typename Elem<T>::acc;
  constexpr int kVec = Elem<T>::kVec;
  acc_t sum = 0;
  int vectors = 0;
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int e = first + k * stride;
    if (e >= lo && e + kVec <= hi) {
      ++vectors;
#pragma unroll
      for (int j = 0; j < kVec; ++j) sum += Elem<T>::get(raw[k], j);
    }
  }
  if (vectors == 0) return {acc_t(0), acc_t(0), acc_t(0)};
  const acc_t n = static_cast<acc_t>(vectors * kVec);
  const acc_t mean0 = sum / n;
  acc_t d = 0, q = 0;
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int e = first + k * stride;
    if (e >= lo && e + kVec <= hi) {
#pragma unroll
      for (int j = 0; j < kVec; ++j) {
        const acc_t v = Elem<T>::get(raw[k], j) - mean0;
        d += v;
        q += v * v;
      }
    }
  }
  const acc_t m2 = q - d * d / n;
  return {mean0 + d / n, m2 > acc_t(0) ? m2 : acc_t(0), n};
}

// y = (x - mean) * scale + shift for the whole vectors a thread holds.
template <typename T, int K, typename Vectors>
__device__ __forceinline__ void store_whole_vectors(const Vectors& raw, T* base, int first, int stride, int lo,
                                                    int hi, typename Elem<T>::acc mean, typename Elem<T>::acc scale,
                                                    typename Elem<T>::acc shift) {
  using acc_t = typename Elem<T>::acc;
  constexpr int kVec = Elem<T>::kVec;
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int e = first + k * stride;
    if (e >= lo && e + kVec <= hi) {
      acc_t out[kVec];
#pragma unroll
      for (int j = 0; j < kVec; ++j) out[j] = (Elem<T>::get(raw[k], j) - mean) * scale + shift;
      __stcs(reinterpret_cast<uint4*>(base + e), Elem<T>::pack(out));
    }
  }
}

template <typename T> struct Params {
  using acc_t = typename Elem<T>::acc;
  const T* x;
  T* y;
  const acc_t* weight;  // (C,) or nullptr
  const acc_t* bias;    // (C,) or nullptr
  acc_t* stats;         // (2, P): mean, then rstd
  int64_t num_instances;
  int64_t instance_size;
  int64_t channels;
  acc_t eps;
};

// =====================================================================================
// Kernel 1: onchip. G threads per instance (a warp up to a whole CTA), optionally a
// cluster of CS CTAs per instance. Each thread keeps K 16-byte vectors in registers.
// =====================================================================================
// The instance lives in dynamic shared memory (K vectors per thread, filled by cp.async) rather
// than in registers: registers stay low and several CTAs share an SM, so one CTA's reduction
// overlaps another's memory traffic. A thread only reads the shared memory its own copies wrote.
template <typename T, int K>
__global__ void __launch_bounds__(kMaxBlock)
onchip_kernel(Params<T> p, int threads_per_instance, int cluster_size) {
  using acc_t = typename Elem<T>::acc;
  constexpr int kVec = Elem<T>::kVec;
  extern __shared__ uint4 held_storage[];
  __shared__ Stats<acc_t> warp_partials[kMaxBlock / kWarpSize];
  __shared__ Stats<acc_t> cta_partial;

  const int G = threads_per_instance;
  const int group = threadIdx.x / G;
  const int local = threadIdx.x - group * G;
  const int rank = cluster_size > 1 ? static_cast<int>(blockIdx.x % cluster_size) : 0;
  const int64_t instance = int64_t(blockIdx.x / cluster_size) * (blockDim.x / G) + group;
  const bool active = instance < p.num_instances;
  const int M = static_cast<int>(p.instance_size);
  const int64_t start = (active ? instance : 0) * p.instance_size;
  const int head = static_cast<int>(start % kVec);  // elements before the instance in its first vector
  // CTA rank r owns a contiguous run of K * G vectors; x + first is 16-byte aligned.
  const int first = ((rank * K) * G + local) * kVec - head;
  const int stride = G * kVec;
  const int hi = active ? M : 0;
  const bool owns_boundary = active && rank == 0 && local == 0;
  const Boundary boundary = boundary_of<T>(M, head);

  const SharedVectors raw{held_storage + threadIdx.x, static_cast<int>(blockDim.x)};
  copy_whole_vectors_async<T, K>(held_storage + threadIdx.x, blockDim.x, p.x + start, first, stride, 0, hi);
  Stats<acc_t> s{};
  if (owns_boundary) s = boundary_stats<T>(p.x + start, boundary);  // overlaps the copies
  wait_async_copies();
  s = merge(thread_stats<T, K>(raw, first, stride, 0, hi), s);
  s = instance_reduce(s, warp_partials, &cta_partial, G, group, cluster_size);

  const acc_t mean = s.mean;
  const acc_t rstd = rsqrt(s.m2 / static_cast<acc_t>(M) + p.eps);
  const int64_t channel = (active ? instance : 0) % p.channels;
  const acc_t scale = p.weight ? rstd * p.weight[channel] : rstd;
  const acc_t shift = p.bias ? p.bias[channel] : acc_t(0);
  store_whole_vectors<T, K>(raw, p.y + start, first, stride, 0, hi, mean, scale, shift);
  if (owns_boundary) {
    store_boundary<T>(p.x + start, p.y + start, boundary, mean, scale, shift);
    p.stats[instance] = mean;
    p.stats[p.num_instances + instance] = rstd;
  }
  cluster_release(cluster_size);
}

// =====================================================================================
// Kernel 2: multi_cta, any instance size. Pass 1 writes (mean, M2, n) per chunk, a warp per
// instance merges the chunks, pass 2 normalizes each chunk (second read, reverse order).
// =====================================================================================

// Chunk `chunk` of an instance is kChunk elements starting on a vector boundary; indices inside it
// are 32-bit and relative to `offset`, and [lo, hi) is the part that belongs to the instance.
struct ChunkSpan {
  int64_t offset;
  int first, stride, lo, hi;
};

template <typename T>
__device__ __forceinline__ Boundary instance_boundary(int64_t instance_size, int64_t instance) {
  return boundary_of<T>(instance_size, static_cast<int>((instance * instance_size) % Elem<T>::kVec));
}

template <typename T>
__device__ __forceinline__ ChunkSpan chunk_span(int64_t instance_size, int64_t instance, int64_t chunk) {
  constexpr int kVec = Elem<T>::kVec;
  constexpr int64_t kChunk = int64_t(kChunkThreads) * kChunkVectorsPerThread * kVec;
  const int64_t start = instance * instance_size;
  const int head = static_cast<int>(start % kVec);
  const int64_t chunk_start = chunk * kChunk - head;  // instance-local index of the chunk's first element
  ChunkSpan span;
  span.offset = start + chunk_start;
  span.first = static_cast<int>(threadIdx.x) * kVec;
  span.stride = kChunkThreads * kVec;
  span.lo = chunk == 0 ? head : 0;
  const int64_t rest = instance_size - chunk_start;
  span.hi = static_cast<int>(rest < kChunk ? rest : kChunk);
  return span;
}

template <typename T>
__global__ void __launch_bounds__(kChunkThreads)
chunk_stats_kernel(Params<T> p, Stats<typename Elem<T>::acc>* partials, int64_t chunks_per_instance) {
  using acc_t = typename Elem<T>::acc;
  const int64_t total = p.num_instances * chunks_per_instance;
  for (int64_t work = blockIdx.x; work < total; work += gridDim.x) {
    const int64_t instance = work / chunks_per_instance;
    const int64_t chunk = work - instance * chunks_per_instance;
    const ChunkSpan span = chunk_span<T>(p.instance_size, instance, chunk);
    uint4 raw[kChunkVectorsPerThread];
    load_whole_vectors<T, kChunkVectorsPerThread>(raw, p.x + span.offset, span.first, span.stride, span.lo, span.hi);
    Stats<acc_t> s = thread_stats<T, kChunkVectorsPerThread>(raw, span.first, span.stride, span.lo, span.hi);
    if (chunk == 0 && threadIdx.x == 0) {
      s = merge(s, boundary_stats<T>(p.x + instance * p.instance_size, instance_boundary<T>(p.instance_size, instance)));
    }
    s = cta_reduce<Stats<acc_t>, kChunkThreads>(s);
    if (threadIdx.x == 0) partials[work] = s;
  }
}

template <typename T>
__global__ void merge_chunks_kernel(Params<T> p, const Stats<typename Elem<T>::acc>* partials,
                                    int64_t chunks_per_instance) {
  using acc_t = typename Elem<T>::acc;
  const int lane = threadIdx.x & (kWarpSize - 1);
  const int64_t warps_total = int64_t(gridDim.x) * (blockDim.x / kWarpSize);
  for (int64_t instance = int64_t(blockIdx.x) * (blockDim.x / kWarpSize) + threadIdx.x / kWarpSize;
       instance < p.num_instances; instance += warps_total) {
    const Stats<acc_t> s = reduce_chunks(partials + instance * chunks_per_instance, chunks_per_instance);
    if (lane == 0) {
      p.stats[instance] = s.mean;
      p.stats[p.num_instances + instance] = rsqrt(s.m2 / static_cast<acc_t>(p.instance_size) + p.eps);
    }
  }
}

template <typename T>
__global__ void __launch_bounds__(kChunkThreads)
normalize_chunks_kernel(Params<T> p, int64_t chunks_per_instance) {
  using acc_t = typename Elem<T>::acc;
  const int64_t total = p.num_instances * chunks_per_instance;
  for (int64_t i = blockIdx.x; i < total; i += gridDim.x) {
    const int64_t work = total - 1 - i;  // reverse of pass 1: its last chunks may still be in L2
    const int64_t instance = work / chunks_per_instance;
    const int64_t chunk = work - instance * chunks_per_instance;
    const ChunkSpan span = chunk_span<T>(p.instance_size, instance, chunk);
    const acc_t mean = p.stats[instance];
    const acc_t rstd = p.stats[p.num_instances + instance];
    const int64_t channel = instance % p.channels;
    const acc_t scale = p.weight ? rstd * p.weight[channel] : rstd;
    const acc_t shift = p.bias ? p.bias[channel] : acc_t(0);
    uint4 raw[kChunkVectorsPerThread];
    load_whole_vectors<T, kChunkVectorsPerThread>(raw, p.x + span.offset, span.first, span.stride, span.lo, span.hi);
    store_whole_vectors<T, kChunkVectorsPerThread>(raw, p.y + span.offset, span.first, span.stride, span.lo, span.hi,
                                                   mean, scale, shift);
    if (chunk == 0 && threadIdx.x == 0) {
      const int64_t start = instance * p.instance_size;
      store_boundary<T>(p.x + start, p.y + start, instance_boundary<T>(p.instance_size, instance), mean, scale, shift);
    }
  }
}

// =====================================================================================
// Kernel 3: backward, the same regimes. With x^ = (x - mean) * rstd and per-instance sums
// A = sum(dy), B = sum(dy * x^):  dx = w * rstd * (dy - A / M - x^ * B / M).
// x and dy stay in registers between the sums and dx; A and B go out for dweight and dbias.
// =====================================================================================
template <typename T> struct BackwardParams {
  using acc_t = typename Elem<T>::acc;
  const T* x;
  const T* dy;
  T* dx;
  const acc_t* weight;  // (C,) or nullptr
  const acc_t* stats;   // (2, P): mean, rstd from the forward
  acc_t* sums;          // (2, P): A, B
  int64_t num_instances;
  int64_t instance_size;
  int64_t channels;
};

template <typename T, int K, typename Vectors>
__device__ __forceinline__ Sums<typename Elem<T>::acc> thread_grad_sums(const Vectors& xr, const Vectors& gr,
                                                                         int first, int stride, int lo, int hi,
                                                                         typename Elem<T>::acc mean) {
  using acc_t = typename Elem<T>::acc;
  constexpr int kVec = Elem<T>::kVec;
  Sums<acc_t> s{};
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int e = first + k * stride;
    if (e >= lo && e + kVec <= hi) {
#pragma unroll
      for (int j = 0; j < kVec; ++j) {
        const acc_t g = Elem<T>::get(gr[k], j);
        s.a += g;
        s.b += g * (Elem<T>::get(xr[k], j) - mean);
      }
    }
  }
  return s;
}

template <typename T>
__device__ __forceinline__ Sums<typename Elem<T>::acc> boundary_grad_sums(const T* x, const T* dy, Boundary bd,
                                                                           typename Elem<T>::acc mean) {
  using acc_t = typename Elem<T>::acc;
  Sums<acc_t> s{};
#pragma unroll 1
  for (int i = 0; i < bd.count(); ++i) {
    const int64_t at = bd.at(i);
    const acc_t g = scalar_at(dy, at);
    s.a += g;
    s.b += g * (scalar_at(x, at) - mean);
  }
  return s;
}

// dx = c1 * dy + c2 + c3 * (x - mean)
template <typename acc_t> struct GradCoefficients {
  acc_t c1, c2, c3;
};

template <typename acc_t>
__device__ __forceinline__ GradCoefficients<acc_t> grad_coefficients(Sums<acc_t> s, acc_t rstd, acc_t weight,
                                                                      int64_t size) {
  const acc_t inv_m = acc_t(1) / static_cast<acc_t>(size);
  const acc_t c1 = weight * rstd;
  return {c1, -c1 * s.a * inv_m, -c1 * rstd * rstd * s.b * inv_m};
}

template <typename T, int K, typename Vectors>
__device__ __forceinline__ void store_whole_grad(const Vectors& xr, const Vectors& gr, T* base, int first,
                                                 int stride, int lo, int hi, typename Elem<T>::acc mean,
                                                 GradCoefficients<typename Elem<T>::acc> c) {
  using acc_t = typename Elem<T>::acc;
  constexpr int kVec = Elem<T>::kVec;
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int e = first + k * stride;
    if (e >= lo && e + kVec <= hi) {
      acc_t out[kVec];
#pragma unroll
      for (int j = 0; j < kVec; ++j) {
        out[j] = c.c1 * Elem<T>::get(gr[k], j) + c.c2 + c.c3 * (Elem<T>::get(xr[k], j) - mean);
      }
      __stcs(reinterpret_cast<uint4*>(base + e), Elem<T>::pack(out));
    }
  }
}

template <typename T>
__device__ __forceinline__ void store_boundary_grad(const T* x, const T* dy, T* dx, Boundary bd,
                                                    typename Elem<T>::acc mean,
                                                    GradCoefficients<typename Elem<T>::acc> c) {
#pragma unroll 1
  for (int i = 0; i < bd.count(); ++i) {
    const int64_t at = bd.at(i);
    dx[at] = Elem<T>::from_acc(c.c1 * scalar_at(dy, at) + c.c2 + c.c3 * (scalar_at(x, at) - mean));
  }
}


template <typename T, int K>
__global__ void __launch_bounds__(kBackwardMaxBlock)
onchip_backward_kernel(BackwardParams<T> p, int threads_per_instance, int cluster_size) {
  using acc_t = typename Elem<T>::acc;
  constexpr int kVec = Elem<T>::kVec;
  extern __shared__ uint4 held_storage[];  // x's K vectors per thread, then dy's
  __shared__ Sums<acc_t> warp_partials[kBackwardMaxBlock / kWarpSize];
  __shared__ Sums<acc_t> cta_partial;

  const int G = threads_per_instance;
  const int group = threadIdx.x / G;
  const int local = threadIdx.x - group * G;
  const int rank = cluster_size > 1 ? static_cast<int>(blockIdx.x % cluster_size) : 0;
  const int64_t instance = int64_t(blockIdx.x / cluster_size) * (blockDim.x / G) + group;
  const bool active = instance < p.num_instances;
  const int M = static_cast<int>(p.instance_size);
  const int64_t start = (active ? instance : 0) * p.instance_size;
  const int head = static_cast<int>(start % kVec);
  const int first = ((rank * K) * G + local) * kVec - head;
  const int stride = G * kVec;
  const int hi = active ? M : 0;
  const bool owns_boundary = active && rank == 0 && local == 0;
  const Boundary boundary = boundary_of<T>(M, head);
  const int64_t safe = active ? instance : 0;
  const acc_t mean = p.stats[safe];
  const acc_t rstd = p.stats[p.num_instances + safe];

  uint4* held_x = held_storage + threadIdx.x;
  uint4* held_dy = held_x + K * blockDim.x;
  const SharedVectors xr{held_x, static_cast<int>(blockDim.x)};
  const SharedVectors gr{held_dy, static_cast<int>(blockDim.x)};
  copy_whole_vectors_async<T, K>(held_x, blockDim.x, p.x + start, first, stride, 0, hi);
  copy_whole_vectors_async<T, K>(held_dy, blockDim.x, p.dy + start, first, stride, 0, hi);
  Sums<acc_t> s{};
  if (owns_boundary) s = boundary_grad_sums<T>(p.x + start, p.dy + start, boundary, mean);
  wait_async_copies();
  s = combine(thread_grad_sums<T, K>(xr, gr, first, stride, 0, hi, mean), s);
  s = instance_reduce(s, warp_partials, &cta_partial, G, group, cluster_size);
  const acc_t weight = p.weight ? p.weight[safe % p.channels] : acc_t(1);
  const GradCoefficients<acc_t> c = grad_coefficients(s, rstd, weight, p.instance_size);
  store_whole_grad<T, K>(xr, gr, p.dx + start, first, stride, 0, hi, mean, c);
  if (owns_boundary) {
    store_boundary_grad<T>(p.x + start, p.dy + start, p.dx + start, boundary, mean, c);
    p.sums[instance] = s.a;
    p.sums[p.num_instances + instance] = s.b * rstd;
  }
  cluster_release(cluster_size);
}

constexpr int kBackwardChunkVectorsPerThread = 4;

template <typename T>
__global__ void __launch_bounds__(kChunkThreads)
chunk_grad_sums_kernel(BackwardParams<T> p, Sums<typename Elem<T>::acc>* partials, int64_t chunks_per_instance) {
  using acc_t = typename Elem<T>::acc;
  const int64_t total = p.num_instances * chunks_per_instance;
  for (int64_t work = blockIdx.x; work < total; work += gridDim.x) {
    const int64_t instance = work / chunks_per_instance;
    const int64_t chunk = work - instance * chunks_per_instance;
    const ChunkSpan span = chunk_span<T>(p.instance_size, instance, chunk);
    const acc_t mean = p.stats[instance];
    Sums<acc_t> s{};
    // A chunk is kChunkVectorsPerThread vectors per thread; two tensors are read in halves.
#pragma unroll 1
    for (int half = 0; half < kChunkVectorsPerThread / kBackwardChunkVectorsPerThread; ++half) {
      const int first = span.first + half * kBackwardChunkVectorsPerThread * span.stride;
      uint4 xr[kBackwardChunkVectorsPerThread], gr[kBackwardChunkVectorsPerThread];
      load_whole_vectors<T, kBackwardChunkVectorsPerThread>(xr, p.x + span.offset, first, span.stride, span.lo, span.hi);
      load_whole_vectors<T, kBackwardChunkVectorsPerThread>(gr, p.dy + span.offset, first, span.stride, span.lo, span.hi);
      s = combine(s, thread_grad_sums<T, kBackwardChunkVectorsPerThread>(xr, gr, first, span.stride, span.lo,
                                                                          span.hi, mean));
    }
    if (chunk == 0 && threadIdx.x == 0) {
      const int64_t start = instance * p.instance_size;
      s = combine(s, boundary_grad_sums<T>(p.x + start, p.dy + start, instance_boundary<T>(p.instance_size, instance),
                                           mean));
    }
    s = cta_reduce<Sums<acc_t>, kChunkThreads>(s);
    if (threadIdx.x == 0) partials[work] = s;
  }
}

template <typename T>
__global__ void merge_grad_sums_kernel(BackwardParams<T> p, const Sums<typename Elem<T>::acc>* partials,
                                       int64_t chunks_per_instance) {
  using acc_t = typename Elem<T>::acc;
  const int lane = threadIdx.x & (kWarpSize - 1);
  const int64_t warps_total = int64_t(gridDim.x) * (blockDim.x / kWarpSize);
  for (int64_t instance = int64_t(blockIdx.x) * (blockDim.x / kWarpSize) + threadIdx.x / kWarpSize;
       instance < p.num_instances; instance += warps_total) {
    const Sums<acc_t> s = reduce_chunks(partials + instance * chunks_per_instance, chunks_per_instance);
    if (lane == 0) {
      p.sums[instance] = s.a;
      p.sums[p.num_instances + instance] = s.b * p.stats[p.num_instances + instance];
    }
  }
}

template <typename T>
__global__ void __launch_bounds__(kChunkThreads)
grad_chunks_kernel(BackwardParams<T> p, int64_t chunks_per_instance) {
  using acc_t = typename Elem<T>::acc;
  const int64_t total = p.num_instances * chunks_per_instance;
  for (int64_t i = blockIdx.x; i < total; i += gridDim.x) {
    const int64_t work = total - 1 - i;  // reverse of pass 1, as in the forward
    const int64_t instance = work / chunks_per_instance;
    const int64_t chunk = work - instance * chunks_per_instance;
    const ChunkSpan span = chunk_span<T>(p.instance_size, instance, chunk);
    const acc_t mean = p.stats[instance];
    const acc_t rstd = p.stats[p.num_instances + instance];
    const Sums<acc_t> s{p.sums[instance], p.sums[p.num_instances + instance] / rstd};
    const acc_t weight = p.weight ? p.weight[instance % p.channels] : acc_t(1);
    const GradCoefficients<acc_t> c = grad_coefficients(s, rstd, weight, p.instance_size);
#pragma unroll 1
    for (int half = 0; half < kChunkVectorsPerThread / kBackwardChunkVectorsPerThread; ++half) {
      const int first = span.first + half * kBackwardChunkVectorsPerThread * span.stride;
      uint4 xr[kBackwardChunkVectorsPerThread], gr[kBackwardChunkVectorsPerThread];
      load_whole_vectors<T, kBackwardChunkVectorsPerThread>(xr, p.x + span.offset, first, span.stride, span.lo, span.hi);
      load_whole_vectors<T, kBackwardChunkVectorsPerThread>(gr, p.dy + span.offset, first, span.stride, span.lo, span.hi);
      store_whole_grad<T, kBackwardChunkVectorsPerThread>(xr, gr, p.dx + span.offset, first, span.stride, span.lo,
                                                          span.hi, mean, c);
    }
    if (chunk == 0 && threadIdx.x == 0) {
      const int64_t start = instance * p.instance_size;
      store_boundary_grad<T>(p.x + start, p.dy + start, p.dx + start, instance_boundary<T>(p.instance_size, instance), mean, c);
    }
  }
}

// =====================================================================================
// Kernel 4: stream, sm_90, instances of one CTA's to 16 CTAs' worth (fp32 512x512 is 1 MiB).
// A persistent grid of clusters; cluster c takes instances c, c + clusters, ... Each CTA owns a
// fixed slice of every instance. The bulk copy engine (cp.async.bulk, completing on an mbarrier)
// keeps the slices of the next instances in flight in a ring of shared-memory buffers; the forward
// also writes its output through it (bulk stores), so no thread stalls on a global store. Per
// instance there is no cluster barrier: each CTA sends its partial into every peer's shared memory
// with st.async, which completes on the receiver's mbarrier, and each CTA merges the cluster's
// partials in rank order, to bitwise the same result. Measured on the H100 (fp32 main shape, in
// units of the copy time): a cluster barrier per instance 1.91x (its release semantics wait for the
// thread's outstanding global stores); st.async 1.44x; sending instance i + 1 before receiving i
// 1.23x; output through bulk stores 1.04x.
// =====================================================================================

#if IN_HAS_CLUSTERS
__device__ __forceinline__ unsigned shared_address(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
#endif

// Waits until the mbarrier's phase of this parity has completed (acquire: what completed it is visible).
__device__ __forceinline__ void wait_parity(unsigned long long* bar, unsigned parity) {
#if IN_HAS_CLUSTERS
  unsigned done = 0;
  while (!done) {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(shared_address(bar)), "r"(parity)
        : "memory");
  }
#endif
}

// The slices of one CTA: `stages` buffers of `tensors` slices each, every buffer with an mbarrier
// that completes when its bulk copies have landed. Only thread 0 issues copies.
struct SlicePipeline {
  uint4* buffers;  // stages * tensors * slice_vectors
  unsigned long long* full;
  int stages;
  int tensors;
  int slice_vectors;  // one CTA's slice of an instance, in 16-byte vectors

  __device__ uint4* slice(int stage, int tensor) const {
    return buffers + (stage * tensors + tensor) * slice_vectors;
  }
  // Thread 0, before the cluster barrier that precedes the first copy.
  __device__ void init() const {
#if IN_HAS_CLUSTERS
    for (int s = 0; s < stages; ++s) {
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(shared_address(full + s)) : "memory");
    }
#endif
  }
  // Thread 0: announce `bytes` per tensor, then copy each tensor's slice into the stage.
  template <int kTensors>
  __device__ void issue(int stage, const void* const (&src)[kTensors], unsigned bytes) const {
#if IN_HAS_CLUSTERS
    const unsigned bar = shared_address(full + stage);
    asm volatile("mbarrier.arrive.expect_tx.relaxed.cta.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar),
                 "r"(bytes * kTensors)
                 : "memory");
    if (bytes == 0) return;
#pragma unroll
    for (int t = 0; t < kTensors; ++t) {
      asm volatile(
          "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
              shared_address(slice(stage, t))),
          "l"(src[t]), "r"(bytes), "r"(bar)
          : "memory");
    }
#endif
  }
  __device__ void wait(int stage, unsigned parity) const { wait_parity(full + stage, parity); }
};

// Where a CTA's slice of every instance lies: elements [begin, begin + count) of the instance.
// The instance is split into whole vectors, slice_vectors per rank (the last slice may be shorter),
// which is why the stream plan needs H*W * sizeof(T) % 16 == 0.
struct StreamGeometry {
  int rank, cluster_size;
  int64_t cluster_id, clusters;
  int64_t begin;
  int count;    // elements
  int vectors;  // count / kVec
};

template <typename T>
__device__ __forceinline__ StreamGeometry stream_geometry(int64_t instance_size, int slice_vectors) {
  constexpr int kVec = Elem<T>::kVec;
  StreamGeometry g{};
#if IN_HAS_CLUSTERS
  cg::cluster_group cluster = cg::this_cluster();
  g.cluster_size = static_cast<int>(cluster.num_blocks());
  g.rank = static_cast<int>(cluster.block_rank());
#else
  g.cluster_size = 1;
#endif
  g.cluster_id = blockIdx.x / g.cluster_size;
  g.clusters = gridDim.x / g.cluster_size;
  const int64_t instance_vectors = instance_size / kVec;
  const int64_t first = min(int64_t(g.rank) * slice_vectors, instance_vectors);
  g.vectors = static_cast<int>(min(int64_t(slice_vectors), instance_vectors - first));
  g.begin = first * kVec;
  g.count = g.vectors * kVec;
  return g;
}

// Partials travel between the CTAs of a cluster as 16-byte st.async writes into slot
// [i % kSlots][rank] of each peer, completing on the peer's mbarrier arrived[i % kSlots]. The
// forward sends instance i + 1 before it receives instance i, so a peer may send instance i + 3
// while this CTA has yet to read its slots of instance i: four slots keep them apart.
constexpr int kSlots = 4;

template <typename P>
union PartialBits {
  P partial;
  uint4 bits;
};

template <typename P>
struct PartialExchange {
  uint4 (*slots)[kMaxCluster];  // [kSlots][kMaxCluster]
  unsigned long long* arrived;  // [kSlots]

  // Thread 0, before the cluster barrier that precedes the first send.
  __device__ void init() const {
#if IN_HAS_CLUSTERS
    for (int slot = 0; slot < kSlots; ++slot) {
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(shared_address(arrived + slot)) : "memory");
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#endif
  }
  // Warp 0, holding the CTA's partial: lane r sends it to rank r.
  __device__ void send(const P& partial, int64_t iteration, const StreamGeometry& g) const {
#if IN_HAS_CLUSTERS
    static_assert(sizeof(P) <= sizeof(uint4), "a partial travels as one 16-byte write");
    const int slot = static_cast<int>(iteration % kSlots);
    if (threadIdx.x == 0) {
      asm volatile("mbarrier.arrive.expect_tx.relaxed.cta.shared::cta.b64 _, [%0], %1;\n" ::"r"(
                       shared_address(arrived + slot)),
                   "r"(static_cast<unsigned>(g.cluster_size * sizeof(uint4)))
                   : "memory");
    }
    if (threadIdx.x < g.cluster_size) {
      PartialBits<P> u;
      u.bits = make_uint4(0, 0, 0, 0);
      u.partial = partial;
      unsigned remote_slot, remote_bar;
      asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n"
                   : "=r"(remote_slot)
                   : "r"(shared_address(&slots[slot][g.rank])), "r"(static_cast<unsigned>(threadIdx.x)));
      asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n"
                   : "=r"(remote_bar)
                   : "r"(shared_address(arrived + slot)), "r"(static_cast<unsigned>(threadIdx.x)));
      asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32 [%0], {%1, %2, %3, %4}, [%5];\n" ::"r"(
                       remote_slot),
                   "r"(u.bits.x), "r"(u.bits.y), "r"(u.bits.z), "r"(u.bits.w), "r"(remote_bar)
                   : "memory");
    }
#endif
  }
  // Every thread: the cluster's partials merged in rank order.
  __device__ P receive(int64_t iteration, const StreamGeometry& g) const {
    const int slot = static_cast<int>(iteration % kSlots);
    wait_parity(arrived + slot, static_cast<unsigned>((iteration / kSlots) & 1));
    const int lane = threadIdx.x & (kWarpSize - 1);
    PartialBits<P> u;
    u.bits = lane < g.cluster_size ? slots[slot][lane] : make_uint4(0, 0, 0, 0);
    return warp_reduce(lane < g.cluster_size ? u.partial : P{});
  }
};

__device__ __forceinline__ void start_cluster() {
#if IN_HAS_CLUSTERS
  cg::this_cluster().sync();
#endif
}

// Reduces the thread partials of the CTA into warp 0; the result is valid in warp 0.
template <typename P>
__device__ __forceinline__ P cta_reduce_to_warp0(P s, P* warp_partials) {
  const int lane = threadIdx.x & (kWarpSize - 1);
  const int warp = threadIdx.x / kWarpSize;
  s = warp_reduce(s);
  if (lane == 0) warp_partials[warp] = s;
  __syncthreads();
  if (warp == 0) s = warp_reduce(lane < kStreamThreads / kWarpSize ? warp_partials[lane] : P{});
  return s;
}

// Bulk stores shared -> global through the copy engine, tracked per issuing thread.
__device__ __forceinline__ void async_proxy_fence() {
#if IN_HAS_CLUSTERS
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void bulk_store(void* dst, const void* src, unsigned bytes) {
#if IN_HAS_CLUSTERS
  if (bytes == 0) return;
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;\n" ::"l"(dst), "r"(shared_address(src)),
               "r"(bytes)
               : "memory");
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
#endif
}
template <int kPending>
__device__ __forceinline__ void bulk_wait_read() {
#if IN_HAS_CLUSTERS
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(kPending) : "memory");
#endif
}
__device__ __forceinline__ void bulk_wait_all() {
#if IN_HAS_CLUSTERS
  asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
#endif
}

// The V vectors a thread owns in a slice: vector threadIdx.x + k * kStreamThreads.
template <int V>
__device__ __forceinline__ void load_slice(uint4 (&raw)[V], const uint4* slice, int vectors) {
#pragma unroll
  for (int k = 0; k < V; ++k) {
    const int v = threadIdx.x + k * kStreamThreads;
    raw[k] = v < vectors ? slice[v] : make_uint4(0, 0, 0, 0);
  }
}

// y = (x - mean) * scale + shift for the vectors a thread owns, into a slice buffer.
template <typename T, int V>
__device__ __forceinline__ void normalize_slice(const uint4 (&raw)[V], uint4* out, int vectors,
                                                typename Elem<T>::acc mean, typename Elem<T>::acc scale,
                                                typename Elem<T>::acc shift) {
  using acc_t = typename Elem<T>::acc;
  constexpr int kVec = Elem<T>::kVec;
#pragma unroll
  for (int k = 0; k < V; ++k) {
    const int v = threadIdx.x + k * kStreamThreads;
    if (v < vectors) {
      acc_t y[kVec];
#pragma unroll
      for (int j = 0; j < kVec; ++j) y[j] = (Elem<T>::get(raw[k], j) - mean) * scale + shift;
      out[v] = Elem<T>::pack(y);
    }
  }
}

// The forward runs one instance ahead: it sends the statistics of instance i + 1 before it waits
// for the cluster's statistics of instance i, so the exchange overlaps the normalization of i.
// A thread holds its vectors of both instances in registers. Each of the `stages` (>= 2) buffers
// cycles through: loaded with an instance (bulk copy), taken into registers, filled with the
// previous instance's output, written out by a bulk store, and loaded again once that store has
// read it. The output leaves through the copy engine too, so no thread stalls on its stores and
// the cluster's CTAs keep in step.
template <typename T, int V>
__global__ void __launch_bounds__(kStreamThreads, 1)
stream_kernel(Params<T> p, int stages, int slice_vectors) {
  using acc_t = typename Elem<T>::acc;
  constexpr int kVec = Elem<T>::kVec;
  extern __shared__ uint4 stream_storage[];
  __shared__ unsigned long long full[kStreamMaxStages];
  __shared__ Stats<acc_t> warp_partials[2][kStreamThreads / kWarpSize];  // by instance parity
  __shared__ uint4 slots[kSlots][kMaxCluster];
  __shared__ unsigned long long arrived[kSlots];

  const StreamGeometry g = stream_geometry<T>(p.instance_size, slice_vectors);
  const PartialExchange<Stats<acc_t>> exchange{slots, arrived};
  const SlicePipeline pipe{stream_storage, full, stages, 1, slice_vectors};
  const unsigned bytes = static_cast<unsigned>(g.count) * sizeof(T);
  if (threadIdx.x == 0) {
    pipe.init();
    exchange.init();
  }
  start_cluster();  // barriers initialized everywhere before any copy or send
  auto instance_of = [&](int64_t iteration) { return g.cluster_id + iteration * g.clusters; };
  auto issue = [&](int64_t iteration) {
    if (instance_of(iteration) >= p.num_instances) return;
    const void* const src[1] = {p.x + instance_of(iteration) * p.instance_size + g.begin};
    pipe.issue<1>(static_cast<int>(iteration % stages), src, bytes);
  };
  const int first = threadIdx.x * kVec;
  const int stride = kStreamThreads * kVec;
  // Takes instance `iteration` out of its buffer into `raw` and sends the statistics.
  auto take_and_send = [&](int64_t iteration, uint4 (&raw)[V]) {
    const int stage = static_cast<int>(iteration % stages);
    pipe.wait(stage, static_cast<unsigned>((iteration / stages) & 1));
    load_slice<V>(raw, pipe.slice(stage, 0), g.vectors);
    const Stats<acc_t> s = cta_reduce_to_warp0(thread_stats<T, V>(raw, first, stride, 0, g.count),
                                               warp_partials[iteration & 1]);
    if (threadIdx.x < kWarpSize) exchange.send(s, iteration, g);
  };

  if (threadIdx.x == 0) {
    for (int s = 0; s < stages; ++s) issue(s);
  }
  uint4 next[V];
  if (instance_of(0) < p.num_instances) take_and_send(0, next);
  const acc_t inv_size = acc_t(1) / static_cast<acc_t>(p.instance_size);
  for (int64_t it = 0; instance_of(it) < p.num_instances; ++it) {
    uint4 raw[V];
#pragma unroll
    for (int k = 0; k < V; ++k) raw[k] = next[k];
    if (instance_of(it + 1) < p.num_instances) take_and_send(it + 1, next);
    const Stats<acc_t> s = exchange.receive(it, g);
    const int64_t instance = instance_of(it);
    const acc_t rstd = rsqrt(s.m2 * inv_size + p.eps);
    const int64_t channel = instance % p.channels;
    const acc_t scale = p.weight ? rstd * p.weight[channel] : rstd;
    const acc_t shift = p.bias ? p.bias[channel] : acc_t(0);
    // The output goes into the buffer just taken (or, after the last take, one whose store has
    // been read: thread 0 waited for that before the previous iteration's barrier).
    uint4* out = pipe.slice(static_cast<int>((it + 1) % stages), 0);
    normalize_slice<T, V>(raw, out, g.vectors, s.mean, scale, shift);
    async_proxy_fence();  // the bulk store reads what this thread wrote
    __syncthreads();
    if (threadIdx.x == 0) {
      bulk_store(p.y + instance * p.instance_size + g.begin, out, bytes);
      bulk_wait_read<1>();  // the previous iteration's store has read its buffer: reload it
      issue(it + stages);
      if (g.rank == 0) {
        p.stats[instance] = s.mean;
        p.stats[p.num_instances + instance] = rstd;
      }
    }
  }
  if (threadIdx.x == 0) bulk_wait_all();
  // A CTA exits only after receiving every peer's last partial, and sends nothing after that.
}

template <typename T, int V>
__global__ void __launch_bounds__(kStreamThreads, 1)
stream_backward_kernel(BackwardParams<T> p, int stages, int slice_vectors) {
  using acc_t = typename Elem<T>::acc;
  constexpr int kVec = Elem<T>::kVec;
  extern __shared__ uint4 stream_storage[];
  __shared__ unsigned long long full[kStreamMaxStages];
  __shared__ Sums<acc_t> warp_partials[2][kStreamThreads / kWarpSize];  // by instance parity: a barrier
                                                                       // separates a buffer's reuse
  __shared__ uint4 slots[kSlots][kMaxCluster];
  __shared__ unsigned long long arrived[kSlots];

  const StreamGeometry g = stream_geometry<T>(p.instance_size, slice_vectors);
  const PartialExchange<Sums<acc_t>> exchange{slots, arrived};
  const SlicePipeline pipe{stream_storage, full, stages, 2, slice_vectors};
  const unsigned bytes = static_cast<unsigned>(g.count) * sizeof(T);
  if (threadIdx.x == 0) {
    pipe.init();
    exchange.init();
  }
  start_cluster();  // barriers initialized everywhere before any copy or send
  auto issue = [&](int64_t iteration) {
    const int64_t instance = g.cluster_id + iteration * g.clusters;
    if (instance >= p.num_instances) return;
    const int64_t offset = instance * p.instance_size + g.begin;
    const void* const src[2] = {p.x + offset, p.dy + offset};
    pipe.issue<2>(static_cast<int>(iteration % stages), src, bytes);
  };
  if (threadIdx.x == 0) {
    for (int s = 0; s < stages; ++s) issue(s);
  }
  for (int64_t it = 0;; ++it) {
    const int64_t instance = g.cluster_id + it * g.clusters;
    if (instance >= p.num_instances) break;
    const int stage = static_cast<int>(it % stages);
    pipe.wait(stage, static_cast<unsigned>((it / stages) & 1));
    uint4 xr[V], gr[V];
    load_slice<V>(xr, pipe.slice(stage, 0), g.vectors);
    load_slice<V>(gr, pipe.slice(stage, 1), g.vectors);
    const acc_t mean = p.stats[instance];
    const acc_t rstd = p.stats[p.num_instances + instance];
    const int first = threadIdx.x * kVec;
    const int stride = kStreamThreads * kVec;
    Sums<acc_t> s = thread_grad_sums<T, V>(xr, gr, first, stride, 0, g.count, mean);
    s = cta_reduce_to_warp0(s, warp_partials[it & 1]);
    if (threadIdx.x == 0) issue(it + stages);
    if (threadIdx.x < kWarpSize) exchange.send(s, it, g);
    s = exchange.receive(it, g);

    const acc_t weight = p.weight ? p.weight[instance % p.channels] : acc_t(1);
    const GradCoefficients<acc_t> c = grad_coefficients(s, rstd, weight, p.instance_size);
    store_whole_grad<T, V>(xr, gr, p.dx + instance * p.instance_size + g.begin, first, stride, 0, g.count, mean, c);
    if (g.rank == 0 && threadIdx.x == 0) {
      p.sums[instance] = s.a;
      p.sums[p.num_instances + instance] = s.b * rstd;
    }
  }
}


// =====================================================================================
// Launch interface: what the host translation unit sees of the kernels (plain types)
// =====================================================================================
template <typename T>
Params<T> forward_params(const Problem& pr) {
  using acc_t = typename Elem<T>::acc;
  Params<T> p;
  p.x = static_cast<const T*>(pr.x);
  p.y = static_cast<T*>(pr.out);
  p.weight = static_cast<const acc_t*>(pr.weight);
  p.bias = static_cast<const acc_t*>(pr.bias);
  p.stats = static_cast<acc_t*>(pr.stats);
  p.num_instances = pr.num_instances;
  p.instance_size = pr.instance_size;
  p.channels = pr.channels;
  p.eps = static_cast<acc_t>(pr.eps);
  return p;
}

template <typename T>
BackwardParams<T> backward_params(const Problem& pr) {
  using acc_t = typename Elem<T>::acc;
  BackwardParams<T> p;
  p.x = static_cast<const T*>(pr.x);
  p.dy = static_cast<const T*>(pr.dy);
  p.dx = static_cast<T*>(pr.out);
  p.weight = static_cast<const acc_t*>(pr.weight);
  p.stats = static_cast<const acc_t*>(pr.stats);
  p.sums = static_cast<acc_t*>(pr.sums);
  p.num_instances = pr.num_instances;
  p.instance_size = pr.instance_size;
  p.channels = pr.channels;
  return p;
}

template <typename T>
const void* typed_kernel_for(Pass pass, const Plan& plan) {
  if constexpr (Elem<T>::kVec < 4) {
    return nullptr;  // float64 runs only the multi_cta plan
  } else {
    const bool forward = pass == Pass::kForward;
    if (plan.stages > 0) {
      if (plan.vectors_per_thread != kStreamVectors) return nullptr;
      return forward ? reinterpret_cast<const void*>(&stream_kernel<T, kStreamVectors>)
                     : reinterpret_cast<const void*>(&stream_backward_kernel<T, kStreamVectors>);
    }
    switch (plan.vectors_per_thread) {
      case 2: return forward ? reinterpret_cast<const void*>(&onchip_kernel<T, 2>)
                             : reinterpret_cast<const void*>(&onchip_backward_kernel<T, 2>);
      case 4: return forward ? reinterpret_cast<const void*>(&onchip_kernel<T, 4>)
                             : reinterpret_cast<const void*>(&onchip_backward_kernel<T, 4>);
      case 8: return forward ? reinterpret_cast<const void*>(&onchip_kernel<T, 8>)
                             : reinterpret_cast<const void*>(&onchip_backward_kernel<T, 8>);
    }
    return nullptr;
  }
}

int64_t grid_limit(int64_t units) { return units < (int64_t(1) << 22) ? units : int64_t(1) << 22; }

template <typename T>
int64_t typed_chunks_per_instance(int64_t instance_size) {
  constexpr int64_t kChunk = int64_t(kChunkThreads) * kChunkVectorsPerThread * Elem<T>::kVec;
  const int64_t head_max = instance_size % Elem<T>::kVec == 0 ? 0 : Elem<T>::kVec - 1;
  return (instance_size + head_max + kChunk - 1) / kChunk;
}

// Partial statistics per chunk, then a per-instance merge, then the normalize (or dx) pass.
template <typename T>
cudaError_t launch_multi_cta(Pass pass, const Problem& pr, void* workspace, cudaStream_t stream) {
  using acc_t = typename Elem<T>::acc;
  const int64_t P = pr.num_instances;
  const int64_t chunks = typed_chunks_per_instance<T>(pr.instance_size);
  const int64_t grid = grid_limit(P * chunks);
  const int64_t merge_grid = grid_limit((P + 7) / 8);
  if (pass == Pass::kForward) {
    const Params<T> p = forward_params<T>(pr);
    auto* partials = static_cast<Stats<acc_t>*>(workspace);
    chunk_stats_kernel<T><<<grid, kChunkThreads, 0, stream>>>(p, partials, chunks);
    merge_chunks_kernel<T><<<merge_grid, 256, 0, stream>>>(p, partials, chunks);
    normalize_chunks_kernel<T><<<grid, kChunkThreads, 0, stream>>>(p, chunks);
  } else {
    const BackwardParams<T> p = backward_params<T>(pr);
    auto* partials = static_cast<Sums<acc_t>*>(workspace);
    chunk_grad_sums_kernel<T><<<grid, kChunkThreads, 0, stream>>>(p, partials, chunks);
    merge_grad_sums_kernel<T><<<merge_grid, 256, 0, stream>>>(p, partials, chunks);
    grad_chunks_kernel<T><<<grid, kChunkThreads, 0, stream>>>(p, chunks);
  }
  return cudaGetLastError();
}

// On-chip kernels take (params, threads_per_instance, cluster_size); stream kernels take
// (params, stages, slice_vectors). Clusters (and every stream plan) go through cudaLaunchKernelExC.
template <typename T>
cudaError_t typed_launch(const Plan& plan, Pass pass, const Problem& pr, const Launch& launch, void* workspace,
                         cudaStream_t stream) {
  if (plan.cluster_size == 0) return launch_multi_cta<T>(pass, pr, workspace, stream);
  const void* kernel = typed_kernel_for<T>(pass, plan);
  if (kernel == nullptr) return cudaErrorInvalidValue;
  Params<T> forward = forward_params<T>(pr);
  BackwardParams<T> backward = backward_params<T>(pr);
  void* params = pass == Pass::kForward ? static_cast<void*>(&forward) : static_cast<void*>(&backward);
  int first = plan.stages > 0 ? plan.stages : plan.threads_per_instance;
  int second = plan.stages > 0 ? launch.slice_vectors : plan.cluster_size;
  void* args[] = {params, &first, &second};
  if (plan.cluster_size == 1 && plan.stages == 0) {
    return cudaLaunchKernel(kernel, dim3(launch.grid), dim3(launch.block), args, launch.smem, stream);
  }
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(launch.grid);
  config.blockDim = dim3(launch.block);
  config.dynamicSmemBytes = launch.smem;
  config.stream = stream;
  cudaLaunchAttribute attribute;
  attribute.id = cudaLaunchAttributeClusterDimension;
  attribute.val.clusterDim.x = plan.cluster_size;
  attribute.val.clusterDim.y = 1;
  attribute.val.clusterDim.z = 1;
  config.attrs = &attribute;
  config.numAttrs = 1;
  return cudaLaunchKernelExC(&config, kernel, args);
}

template <typename F>
auto with_type(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kHalf: return f(__half());
    case DType::kBFloat16: return f(__nv_bfloat16());
    case DType::kDouble: return f(double());
    default: return f(float());
  }
}

}  // namespace

const void* kernel_for(DType dtype, Pass pass, const Plan& plan) {
  return with_type(dtype, [&](auto tag) { return typed_kernel_for<decltype(tag)>(pass, plan); });
}

int64_t chunks_per_instance(DType dtype, int64_t instance_size) {
  return with_type(dtype, [&](auto tag) { return typed_chunks_per_instance<decltype(tag)>(instance_size); });
}

int64_t chunk_partial_bytes(DType dtype, Pass pass) {
  return with_type(dtype, [&](auto tag) -> int64_t {
    using acc_t = typename Elem<decltype(tag)>::acc;
    return pass == Pass::kForward ? sizeof(Stats<acc_t>) : sizeof(Sums<acc_t>);
  });
}

cudaError_t launch_kernel(const Plan& plan, Pass pass, const Problem& problem, const Launch& launch, void* workspace,
                          cudaStream_t stream) {
  return with_type(problem.dtype, [&](auto tag) {
    return typed_launch<decltype(tag)>(plan, pass, problem, launch, workspace, stream);
  });
}

}  // namespace INSTANCE_NORM_NS
"""

_HOST_SOURCE = r"""
// =====================================================================================
// Host: plan choice, validation, ATen wrappers and operator registration
// =====================================================================================
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>
#include <limits>
#include <map>
#include <mutex>
#include <string>
#include <tuple>

// Formatted TORCH_CHECK messages go through c10's out-of-line torchCheckFail(std::string), which
// crashed this extension on the H100 image (torch 2.11); TORCH_CHECK_WITH throws the same
// c10::Error (a Python RuntimeError) from inline code.
#define IN_CHECK(cond, ...) TORCH_CHECK_WITH(Error, cond, __VA_ARGS__)

namespace INSTANCE_NORM_NS {
namespace {

std::string describe(const Plan& plan) {
  if (plan.cluster_size == 0) return "multi_cta";
  std::string kg = "K=" + std::to_string(plan.vectors_per_thread) + ",G=" + std::to_string(plan.threads_per_instance);
  if (plan.stages > 0) {
    return "stream(" + kg + ",CS=" + std::to_string(plan.cluster_size) + ",S=" + std::to_string(plan.stages) + ")";
  }
  if (plan.cluster_size == 1) return "onchip(" + kg + ")";
  return "cluster(" + kg + ",CS=" + std::to_string(plan.cluster_size) + ")";
}

// Compute capability major, SM count and opt-in shared memory of the current device, read once.
struct DeviceInfo {
  int major;
  int sms;
  int max_smem;
};

DeviceInfo device_info() {
  static std::mutex mutex;
  static std::map<int, DeviceInfo> cache;
  const int device = c10::cuda::current_device();
  std::lock_guard<std::mutex> lock(mutex);
  auto it = cache.find(device);
  if (it != cache.end()) return it->second;
  DeviceInfo info{};
  C10_CUDA_CHECK(cudaDeviceGetAttribute(&info.major, cudaDevAttrComputeCapabilityMajor, device));
  C10_CUDA_CHECK(cudaDeviceGetAttribute(&info.sms, cudaDevAttrMultiProcessorCount, device));
  C10_CUDA_CHECK(cudaDeviceGetAttribute(&info.max_smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  return cache.emplace(device, info).first->second;
}

int tensors_of(Pass pass) { return pass == Pass::kForward ? 1 : 2; }  // held per instance: x (and dy)

int vector_width(DType dtype) {  // elements per 16-byte vector
  return dtype == DType::kDouble ? 2 : dtype == DType::kFloat ? 4 : 8;
}

// ---- on-chip plans ----
int block_threads(const Plan& plan) { return plan.threads_per_instance < 128 ? 256 : plan.threads_per_instance; }

// Dynamic shared memory of an on-chip plan: K vectors per thread for each held tensor.
int held_bytes(const Plan& plan, int tensors) {
  return tensors * plan.vectors_per_thread * block_threads(plan) * 16;
}

// Vector slots an instance can straddle: it starts on a vector boundary when H*W is a multiple
// of the vector width (the base pointer is always 16-byte aligned here), otherwise anywhere.
int64_t vector_slots(int64_t instance_size, int vec) {
  return instance_size % vec == 0 ? instance_size / vec : (instance_size + vec - 2) / vec + 1;
}

bool plan_holds(const Plan& plan, int64_t slots) {
  return int64_t(plan.vectors_per_thread) * plan.threads_per_instance * plan.cluster_size >= slots;
}

// How many CTAs (cluster_size 1) or clusters of `kernel` can be resident at once, from the
// occupancy APIs, after granting its dynamic shared memory; 0 when it cannot run at all. Cached.
int resident_units(const void* kernel, int cluster_size, int block, int smem) {
  static std::mutex mutex;
  static std::map<std::tuple<int, const void*, int, int, int>, int> cache;
  static std::map<std::pair<int, const void*>, int> granted;  // the attribute only ever grows
  if (kernel == nullptr) return 0;
  const int device = c10::cuda::current_device();
  const auto key = std::make_tuple(device, kernel, block, cluster_size, smem);
  std::lock_guard<std::mutex> lock(mutex);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  int units = 0;
  const DeviceInfo info = device_info();
  if (smem + 4096 <= info.max_smem && (cluster_size == 1 || (info.major >= 9 && cluster_size <= kMaxCluster))) {
    int& current = granted[{device, kernel}];
    if (smem > current) {
      C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
      current = smem;
    }
    if (cluster_size == 1) {
      int blocks = 0;
      if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, block, smem) == cudaSuccess) {
        units = blocks * info.sms;
      }
    } else {
      if (cluster_size > 8) {
        C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
      }
      cudaLaunchConfig_t config = {};
      config.gridDim = dim3(cluster_size);
      config.blockDim = dim3(block);
      config.dynamicSmemBytes = smem;
      cudaLaunchAttribute attribute;
      attribute.id = cudaLaunchAttributeClusterDimension;
      attribute.val.clusterDim.x = cluster_size;
      attribute.val.clusterDim.y = 1;
      attribute.val.clusterDim.z = 1;
      config.attrs = &attribute;
      config.numAttrs = 1;
      int clusters = 0;
      if (cudaOccupancyMaxActiveClusters(&clusters, kernel, &config) == cudaSuccess) units = clusters;
    }
    (void)cudaGetLastError();  // a refused configuration is an answer, not an error
  }
  cache.emplace(key, units);
  return units;
}

int onchip_resident(DType dtype, Pass pass, const Plan& plan) {
  return resident_units(kernel_for(dtype, pass, plan), plan.cluster_size, block_threads(plan),
                        held_bytes(plan, tensors_of(pass)));
}

// ---- stream plans: vectors_per_thread = kStreamVectors, threads_per_instance = kStreamThreads ----
// A CTA's slice of an instance, in vectors; the instance must be whole vectors.
int64_t stream_slice_vectors(int64_t instance_size, int vec, int cluster_size) {
  return (instance_size / vec + cluster_size - 1) / cluster_size;
}

int64_t stream_smem(const Plan& plan, int64_t slice_vectors, Pass pass) {
  return int64_t(plan.stages) * tensors_of(pass) * slice_vectors * 16;
}

// Clusters of a stream plan resident at once; 0 when it cannot run at all.
int stream_resident(DType dtype, Pass pass, const Plan& plan, int64_t instance_size) {
  const int64_t slice = stream_slice_vectors(instance_size, vector_width(dtype), plan.cluster_size);
  const int64_t smem = stream_smem(plan, slice, pass);
  if (smem > (int64_t(1) << 20)) return 0;
  return resident_units(kernel_for(dtype, pass, plan), plan.cluster_size, kStreamThreads, static_cast<int>(smem));
}

// The forward's buffers hold an input and, later, an output: it needs two.
int min_stages(Pass pass) { return pass == Pass::kForward ? 2 : 1; }

// The smallest cluster whose slices fit, with as many stages as shared memory allows; no plan
// (cluster_size 0) when the instance is not whole vectors, the GPU has no clusters, or nothing fits.
Plan choose_stream_plan(DType dtype, Pass pass, int64_t instance_size) {
  const int vec = vector_width(dtype);
  if (dtype == DType::kDouble || instance_size % vec != 0 || device_info().major < 9) return {0, 0, 0};
  for (int cs = 1; cs <= kMaxCluster; cs *= 2) {
    if (stream_slice_vectors(instance_size, vec, cs) > kStreamVectors * kStreamThreads) continue;
    for (int stages = kStreamMaxStages; stages >= min_stages(pass); --stages) {
      const Plan plan{cs, kStreamVectors, kStreamThreads, stages};
      if (stream_resident(dtype, pass, plan, instance_size) > 0) return plan;
    }
    break;
  }
  return {0, 0, 0};
}

// The heuristic, from benchmarks/tune.py on an H100 (2026-11-25). Small instances: a warp each,
// several per CTA. Up to 1024 threads of K = 8 vectors: one CTA per instance. Larger instances of
// whole vectors: the stream kernel (fp32 512x512: 1.04x the copy time). Otherwise a cluster of 8
// CTAs up to four CTAs' worth, then multi_cta.
Plan choose_plan_uncached(DType dtype, int64_t instance_size) {
  if (dtype == DType::kDouble) return {0, 0, 0};  // accuracy over speed: one general path
  const int64_t slots = vector_slots(instance_size, vector_width(dtype));
  if (slots <= kWarpSize * 8) {
    const int K = slots <= kWarpSize * 2 ? 2 : slots <= kWarpSize * 4 ? 4 : 8;
    return {1, K, kWarpSize};
  }
  constexpr int K = 8;
  int64_t threads = kWarpSize;
  while (threads * K < slots) threads *= 2;
  if (threads <= kMaxBlock) return Plan{1, K, static_cast<int>(threads)};
  const Plan stream = choose_stream_plan(dtype, Pass::kForward, instance_size);
  if (stream.cluster_size > 0) return stream;
  if (threads <= 4 * kMaxBlock && device_info().major >= 9) {
    const Plan plan{8, K, static_cast<int>(threads / 8)};
    if (onchip_resident(dtype, Pass::kForward, plan) > 0) return plan;
  }
  return {0, 0, 0};
}

// Plan choice sits on the launch path of small, launch-bound shapes: remember it per device,
// dtype and instance size.
Plan choose_plan(DType dtype, int64_t instance_size) {
  static std::mutex mutex;
  static std::map<std::tuple<int, int, int64_t>, Plan> cache;
  const auto key = std::make_tuple(static_cast<int>(c10::cuda::current_device()), static_cast<int>(dtype),
                                   instance_size);
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = cache.find(key);
    if (it != cache.end()) return it->second;
  }
  const Plan plan = choose_plan_uncached(dtype, instance_size);
  std::lock_guard<std::mutex> lock(mutex);
  cache.emplace(key, plan);
  return plan;
}

// The forward's on-chip plan when x and dy both fit in its shared memory; else the stream plan for
// two tensors; else multi_cta.
Plan choose_backward_plan(DType dtype, int64_t instance_size) {
  const Plan plan = choose_plan(dtype, instance_size);
  if (plan.cluster_size > 0 && plan.stages == 0 && block_threads(plan) <= kBackwardMaxBlock &&
      onchip_resident(dtype, Pass::kBackward, plan) > 0) {
    return plan;
  }
  const Plan stream = choose_stream_plan(dtype, Pass::kBackward, instance_size);
  return stream.cluster_size > 0 ? stream : Plan{0, 0, 0};
}

// Validates a plan forced through forward_with_plan / backward_with_plan.
void check_plan(DType dtype, Pass pass, const Plan& plan, int64_t instance_size) {
  if (plan.cluster_size == 0) return;
  const int G = plan.threads_per_instance;
  const int vec = vector_width(dtype);
  IN_CHECK(dtype != DType::kDouble, "instance_norm: float64 input runs only the multi_cta plan (cluster_size=0)");
  IN_CHECK(plan.cluster_size == 1 || plan.cluster_size == 2 || plan.cluster_size == 4 || plan.cluster_size == 8 ||
               plan.cluster_size == 16,
           "instance_norm: cluster_size must be 0, 1, 2, 4, 8 or 16");
  if (plan.stages > 0) {
    IN_CHECK(plan.stages >= min_stages(pass) && plan.stages <= kStreamMaxStages,
             "instance_norm: this stream plan takes ", std::to_string(min_stages(pass)), " to ",
             std::to_string(kStreamMaxStages), " stages");
    IN_CHECK(plan.vectors_per_thread == kStreamVectors && G == kStreamThreads,
             "instance_norm: a stream plan takes vectors_per_thread=", std::to_string(kStreamVectors),
             " and threads_per_instance=", std::to_string(kStreamThreads));
    IN_CHECK(device_info().major >= 9, "instance_norm: stream plans need sm_90 or newer");
    IN_CHECK(instance_size % vec == 0,
             "instance_norm: a stream plan needs H*W times the element size to be a multiple of 16 bytes");
    IN_CHECK(stream_slice_vectors(instance_size, vec, plan.cluster_size) <= kStreamVectors * kStreamThreads,
             "instance_norm: plan ", describe(plan), " cannot hold an instance of ", std::to_string(instance_size),
             " elements");
    return;
  }
  const int max_threads = pass == Pass::kForward ? kMaxBlock : kBackwardMaxBlock;
  IN_CHECK(plan.vectors_per_thread == 2 || plan.vectors_per_thread == 4 || plan.vectors_per_thread == 8,
           "instance_norm: vectors_per_thread must be 2, 4 or 8");
  IN_CHECK(G >= kWarpSize && G <= max_threads && (G & (G - 1)) == 0,
           "instance_norm: threads_per_instance must be a power of two in [32, ", std::to_string(max_threads),
           "] for this plan");
  IN_CHECK(plan_holds(plan, vector_slots(instance_size, vec)), "instance_norm: plan ", describe(plan),
           " cannot hold an instance of ", std::to_string(instance_size), " elements");
  if (plan.cluster_size > 1) {
    IN_CHECK(G >= 128, "instance_norm: a cluster plan needs threads_per_instance >= 128");
    IN_CHECK(device_info().major >= 9, "instance_norm: cluster plans need sm_90 or newer");
  }
}

// Sizes the launch of a plan (grid, shared memory, multi_cta workspace) and runs it on the
// current stream.
void run(const Plan& plan, Pass pass, const Problem& problem) {
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  const int64_t P = problem.num_instances;
  Launch launch{};
  at::Tensor workspace;  // multi_cta chunk partials, owned by the caching allocator
  if (plan.cluster_size == 0) {
    const int64_t bytes = P * chunks_per_instance(problem.dtype, problem.instance_size) *
                          chunk_partial_bytes(problem.dtype, pass);
    workspace = at::empty({bytes}, at::TensorOptions().dtype(at::kByte).device(at::kCUDA, c10::cuda::current_device()));
  } else if (plan.stages > 0) {
    const int resident = stream_resident(problem.dtype, pass, plan, problem.instance_size);
    IN_CHECK(resident > 0, "instance_norm: plan ", describe(plan), " does not fit on this device (shared memory)");
    launch.slice_vectors = static_cast<int>(
        stream_slice_vectors(problem.instance_size, vector_width(problem.dtype), plan.cluster_size));
    launch.smem = static_cast<int>(stream_smem(plan, launch.slice_vectors, pass));
    launch.block = kStreamThreads;
    // A persistent grid: as many clusters as fit at once, or one per instance if there are fewer.
    launch.grid = static_cast<unsigned>(std::min<int64_t>(resident, P) * plan.cluster_size);
  } else {
    IN_CHECK(onchip_resident(problem.dtype, pass, plan) > 0, "instance_norm: plan ", describe(plan),
             " cannot run on this device (shared memory, or thread block clusters that need sm_90)");
    launch.block = block_threads(plan);
    launch.smem = held_bytes(plan, tensors_of(pass));
    const int groups_per_block = launch.block / plan.threads_per_instance;
    const int64_t units = (P + groups_per_block - 1) / groups_per_block;  // CTAs, or clusters
    IN_CHECK(units * plan.cluster_size <= int64_t(std::numeric_limits<int>::max()),
             "instance_norm: too many instances (", std::to_string(P), ") for one launch");
    launch.grid = static_cast<unsigned>(units * plan.cluster_size);
  }
  C10_CUDA_CHECK(launch_kernel(plan, pass, problem, launch, workspace.defined() ? workspace.data_ptr() : nullptr,
                               stream));
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// ---- ATen wrappers ----
void check_input(const at::Tensor& x) {
  IN_CHECK(x.is_cuda(), "instance_norm: expected a CUDA tensor, got one on ", x.device().str());
  IN_CHECK(x.dim() == 4, "instance_norm: expected a 4-D (N, C, H, W) tensor, got ", std::to_string(x.dim()), "-D");
  const auto t = x.scalar_type();
  TORCH_CHECK_NOT_IMPLEMENTED(t == at::kFloat || t == at::kHalf || t == at::kBFloat16 || t == at::kDouble,
                              "instance_norm: expected a float16, bfloat16, float32 or float64 tensor, got ", t);
}

DType dtype_of(const at::Tensor& x) {
  switch (x.scalar_type()) {
    case at::kHalf: return DType::kHalf;
    case at::kBFloat16: return DType::kBFloat16;
    case at::kDouble: return DType::kDouble;
    default: return DType::kFloat;
  }
}

at::ScalarType accumulation_type(const at::Tensor& x) { return x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat; }

at::Tensor affine_param(const c10::optional<at::Tensor>& param, const at::Tensor& x, const char* name) {
  if (!param.has_value() || !param->defined()) return at::Tensor();
  IN_CHECK(param->device() == x.device(), "instance_norm: ", name, " is on ", param->device().str(),
           " but the input is on ", x.device().str());
  IN_CHECK(param->numel() == x.size(1), "instance_norm: ", name, " has ", std::to_string(param->numel()),
           " elements, expected one per channel (", std::to_string(x.size(1)), ")");
  return param->to(accumulation_type(x)).contiguous();
}

// NCHW-contiguous and 16-byte aligned, the layout every kernel reads.
at::Tensor aligned_contiguous(const at::Tensor& t) {
  at::Tensor c = t.contiguous();
  return reinterpret_cast<uintptr_t>(c.data_ptr()) % 16 == 0 ? c : c.clone(at::MemoryFormat::Contiguous);
}

Problem problem_of(const at::Tensor& x, at::Tensor& out) {
  Problem pr{};
  pr.dtype = dtype_of(x);
  pr.x = x.data_ptr();
  pr.out = out.data_ptr();
  pr.num_instances = x.size(0) * x.size(1);
  pr.instance_size = x.size(2) * x.size(3);
  pr.channels = x.size(1);
  return pr;
}

std::tuple<at::Tensor, at::Tensor> forward_impl(const at::Tensor& input, const c10::optional<at::Tensor>& weight,
                                                const c10::optional<at::Tensor>& bias, double eps,
                                                const Plan* forced) {
  check_input(input);
  c10::cuda::CUDAGuard guard(input.device());
  at::Tensor x = aligned_contiguous(input);
  at::Tensor w = affine_param(weight, x, "weight");
  at::Tensor b = affine_param(bias, x, "bias");
  at::Tensor y = at::empty(x.sizes(), x.options());
  at::Tensor stats = at::empty({2, x.size(0) * x.size(1)}, x.options().dtype(accumulation_type(x)));
  if (x.numel() == 0) {
    stats.fill_(std::numeric_limits<double>::quiet_NaN());
    return {y, stats};
  }
  Problem pr = problem_of(x, y);
  pr.weight = w.defined() ? w.data_ptr() : nullptr;
  pr.bias = b.defined() ? b.data_ptr() : nullptr;
  pr.stats = stats.data_ptr();
  pr.eps = eps;
  const Plan plan = forced ? *forced : choose_plan(pr.dtype, pr.instance_size);
  if (forced) check_plan(pr.dtype, Pass::kForward, plan, pr.instance_size);
  run(plan, Pass::kForward, pr);
  return {y, stats};
}

std::tuple<at::Tensor, at::Tensor> forward(const at::Tensor& x, const c10::optional<at::Tensor>& weight,
                                           const c10::optional<at::Tensor>& bias, double eps) {
  return forward_impl(x, weight, bias, eps, nullptr);
}

Plan forced_plan(int64_t vectors_per_thread, int64_t threads_per_instance, int64_t cluster_size, int64_t stages) {
  IN_CHECK(cluster_size >= 0 && cluster_size <= kMaxCluster, "instance_norm: cluster_size must be in [0, 16]");
  IN_CHECK(stages >= 0 && stages <= kStreamMaxStages, "instance_norm: stages must be in [0, ",
           std::to_string(kStreamMaxStages), "]");
  IN_CHECK(vectors_per_thread >= 0 && vectors_per_thread <= 64 && threads_per_instance >= 0 &&
               threads_per_instance <= kMaxBlock,
           "instance_norm: vectors_per_thread or threads_per_instance out of range");
  return {static_cast<int>(cluster_size), static_cast<int>(vectors_per_thread), static_cast<int>(threads_per_instance),
          static_cast<int>(stages)};
}

std::tuple<at::Tensor, at::Tensor> forward_with_plan(const at::Tensor& x, const c10::optional<at::Tensor>& weight,
                                                     const c10::optional<at::Tensor>& bias, double eps,
                                                     int64_t vectors_per_thread, int64_t threads_per_instance,
                                                     int64_t cluster_size, int64_t stages) {
  const Plan plan = forced_plan(vectors_per_thread, threads_per_instance, cluster_size, stages);
  return forward_impl(x, weight, bias, eps, &plan);
}

std::tuple<at::Tensor, at::Tensor> backward_impl(const at::Tensor& grad_output, const at::Tensor& input,
                                                 const c10::optional<at::Tensor>& weight, const at::Tensor& stats_in,
                                                 const Plan* forced) {
  check_input(input);
  IN_CHECK(grad_output.sizes() == input.sizes() && grad_output.scalar_type() == input.scalar_type() &&
               grad_output.device() == input.device(),
           "instance_norm backward: grad_output must match the input's shape, dtype and device");
  c10::cuda::CUDAGuard guard(input.device());
  const auto acc = accumulation_type(input);
  const int64_t P = input.size(0) * input.size(1);
  IN_CHECK(stats_in.dim() == 2 && stats_in.size(0) == 2 && stats_in.size(1) == P && stats_in.scalar_type() == acc &&
               stats_in.device() == input.device(),
           "instance_norm backward: stats must be the forward's (2, N*C) statistics");
  at::Tensor x = aligned_contiguous(input);
  at::Tensor dy = aligned_contiguous(grad_output);
  at::Tensor stats = stats_in.contiguous();
  at::Tensor w = affine_param(weight, x, "weight");
  at::Tensor dx = at::empty(x.sizes(), x.options());
  at::Tensor sums = at::empty({2, P}, x.options().dtype(acc));
  if (x.numel() == 0) {
    sums.zero_();
    return {dx, sums};
  }
  Problem pr = problem_of(x, dx);
  pr.dy = dy.data_ptr();
  pr.weight = w.defined() ? w.data_ptr() : nullptr;
  pr.stats = stats.data_ptr();
  pr.sums = sums.data_ptr();
  const Plan plan = forced ? *forced : choose_backward_plan(pr.dtype, pr.instance_size);
  if (forced) check_plan(pr.dtype, Pass::kBackward, plan, pr.instance_size);
  run(plan, Pass::kBackward, pr);
  return {dx, sums};
}

std::tuple<at::Tensor, at::Tensor> backward(const at::Tensor& grad_output, const at::Tensor& x,
                                            const c10::optional<at::Tensor>& weight, const at::Tensor& stats) {
  return backward_impl(grad_output, x, weight, stats, nullptr);
}

std::tuple<at::Tensor, at::Tensor> backward_with_plan(const at::Tensor& grad_output, const at::Tensor& x,
                                                      const c10::optional<at::Tensor>& weight, const at::Tensor& stats,
                                                      int64_t vectors_per_thread, int64_t threads_per_instance,
                                                      int64_t cluster_size, int64_t stages) {
  const Plan plan = forced_plan(vectors_per_thread, threads_per_instance, cluster_size, stages);
  return backward_impl(grad_output, x, weight, stats, &plan);
}

std::string describe_plan(const at::Tensor& x, bool backward) {
  check_input(x);
  c10::cuda::CUDAGuard guard(x.device());
  const int64_t size = x.size(2) * x.size(3);
  return describe(backward ? choose_backward_plan(dtype_of(x), size) : choose_plan(dtype_of(x), size));
}

}  // namespace
}  // namespace INSTANCE_NORM_NS

TORCH_LIBRARY(INSTANCE_NORM_NS, m) {
  m.def("forward(Tensor x, Tensor? weight, Tensor? bias, float eps) -> (Tensor, Tensor)");
  // The same kernel without an autograd formula: the eager no-grad path skips Python autograd glue.
  m.def("infer(Tensor x, Tensor? weight, Tensor? bias, float eps) -> (Tensor, Tensor)");
  m.def("forward_with_plan(Tensor x, Tensor? weight, Tensor? bias, float eps, int vectors_per_thread, "
        "int threads_per_instance, int cluster_size, int stages=0) -> (Tensor, Tensor)");
  m.def("describe_plan(Tensor x, bool backward=False) -> str");
  m.def("backward(Tensor grad_output, Tensor x, Tensor? weight, Tensor stats) -> (Tensor, Tensor)");
  m.def("backward_with_plan(Tensor grad_output, Tensor x, Tensor? weight, Tensor stats, int vectors_per_thread, "
        "int threads_per_instance, int cluster_size, int stages=0) -> (Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(INSTANCE_NORM_NS, CUDA, m) {
  m.impl("forward", &INSTANCE_NORM_NS::forward);
  m.impl("infer", &INSTANCE_NORM_NS::forward);
  m.impl("forward_with_plan", &INSTANCE_NORM_NS::forward_with_plan);
  m.impl("describe_plan", &INSTANCE_NORM_NS::describe_plan);
  m.impl("backward", &INSTANCE_NORM_NS::backward);
  m.impl("backward_with_plan", &INSTANCE_NORM_NS::backward_with_plan);
}
"""

# --------------------------------------------------------------------------------------------------
# Building and loading the extension
# --------------------------------------------------------------------------------------------------
_BUILD_FLAGS = ["-O3"]
_DIGEST = hashlib.sha256(
    (_INTERFACE + _KERNEL_SOURCE + _HOST_SOURCE + " ".join(_BUILD_FLAGS) + torch.__version__).encode()
).hexdigest()[:16]
_NAMESPACE = "instance_norm_" + _DIGEST
_ops = None


def load_extension():
    """Build (first time only; cached by source hash) and load the CUDA extension; return its ops.

    Needs nvcc but no GPU. Set INSTANCE_NORM_VERBOSE=1 to see the build log.
    """
    global _ops
    if _ops is None:
        from torch.utils.cpp_extension import load_inline

        options = {}
        if "no_implicit_headers" in inspect.signature(load_inline).parameters:
            options["no_implicit_headers"] = True  # skip torch/extension.h in both translation units
        # Two translation units that ninja compiles in parallel: the kernels (nvcc, no ATen headers)
        # and the host side (the C++ compiler alone, no nvcc passes over ATen).
        load_inline(
            name=_NAMESPACE,
            cpp_sources=(_INTERFACE + _HOST_SOURCE).replace("INSTANCE_NORM_NS", _NAMESPACE),
            cuda_sources=(_INTERFACE + _KERNEL_SOURCE).replace("INSTANCE_NORM_NS", _NAMESPACE),
            extra_cflags=["-O2"],
            extra_cuda_cflags=_BUILD_FLAGS,
            is_python_module=False,
            verbose=os.environ.get("INSTANCE_NORM_VERBOSE", "") == "1",
            **options,
        )
        ops = getattr(torch.ops, _NAMESPACE)
        _register_python_kernels()
        _ops = ops
    return _ops


def _register_python_kernels():
    """Fake (meta) kernels for torch.compile and autograd formulas for the custom ops.

    Idempotent: the same extension may be loaded by an import and by a harness exec of this file.
    """
    forward_op = f"{_NAMESPACE}::forward"
    try:
        from torch._library.simple_registry import singleton

        if singleton.find(forward_op).fake_impl.kernel is not None:
            return
    except Exception:
        pass

    def stats_like(x):
        dtype = torch.float64 if x.dtype == torch.float64 else torch.float32
        return x.new_empty((2, x.shape[0] * x.shape[1]), dtype=dtype)

    def fake_forward(x, weight, bias, eps):
        return torch.empty(x.shape, dtype=x.dtype, device=x.device), stats_like(x)

    def fake_backward(grad_output, x, weight, stats):
        return torch.empty(x.shape, dtype=x.dtype, device=x.device), stats_like(x)

    for name in ("forward", "infer"):
        torch.library.register_fake(f"{_NAMESPACE}::{name}")(fake_forward)
    torch.library.register_fake(f"{_NAMESPACE}::backward")(fake_backward)

    def setup_forward(ctx, inputs, output):
        x, weight, bias, _ = inputs
        ctx.save_for_backward(x, weight, output[1])
        ctx.bias_dtype = None if bias is None else bias.dtype
        ctx.mark_non_differentiable(output[1])

    def backward_of_forward(ctx, grad_y, grad_stats):
        x, weight, stats = ctx.saved_tensors
        grad_x, sums = getattr(torch.ops, _NAMESPACE).backward(grad_y, x, weight, stats)
        n, c = x.shape[0], x.shape[1]
        # sums[0] = sum(dy), sums[1] = sum(dy * x_hat) per instance; summing over N in a fixed order
        # keeps dweight and dbias deterministic.
        grad_weight = sums[1].view(n, c).sum(0).to(weight.dtype) if ctx.needs_input_grad[1] else None
        grad_bias = sums[0].view(n, c).sum(0).to(ctx.bias_dtype) if ctx.needs_input_grad[2] else None
        return (grad_x if ctx.needs_input_grad[0] else None), grad_weight, grad_bias, None

    def no_double_backward(ctx, *grads):
        raise RuntimeError("InstanceNorm2d (instance_norm.ModelNew): double backward is not supported")

    torch.library.register_autograd(forward_op, backward_of_forward, setup_context=setup_forward)
    torch.library.register_autograd(
        f"{_NAMESPACE}::backward", no_double_backward, setup_context=lambda ctx, inputs, output: None
    )


def cuda_kernels_available():
    """True when a CUDA device is usable and the extension is loaded."""
    return _ops is not None and torch.cuda.is_available()


if torch.cuda.is_available():
    load_extension()

# --------------------------------------------------------------------------------------------------
# The module
# --------------------------------------------------------------------------------------------------
_KERNEL_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)


class ModelNew(nn.InstanceNorm2d):
    """``nn.InstanceNorm2d`` with the normalization done by this file's CUDA kernels.

    Same constructor, parameters, buffers and state_dict as ``nn.InstanceNorm2d``.
    """

    def forward(self, x):
        if x.dim() not in (3, 4):
            raise ValueError(f"expected 3D or 4D input (got {x.dim()}D input)")
        feature_dim = x.dim() - 3
        if x.size(feature_dim) != self.num_features:
            if self.affine:
                raise ValueError(
                    f"expected input's size at dim={feature_dim} to match num_features"
                    f" ({self.num_features}), but got: {x.size(feature_dim)}."
                )
            warnings.warn(
                f"input's size at dim={feature_dim} does not match num_features. "
                "You can silence this warning by not passing in num_features, "
                "which is not used because affine=False",
                stacklevel=2,
            )
        if x.dim() == 3:
            return self._normalize(x.unsqueeze(0)).squeeze(0)
        return self._normalize(x)

    def _normalize(self, x):
        if not x.is_floating_point() or x.is_complex():
            raise NotImplementedError(
                f"InstanceNorm2d: input dtype {x.dtype} is not supported; "
                "expected float16, bfloat16, float32 or float64"
            )
        use_input_stats = self.training or not self.track_running_stats
        if (
            not use_input_stats
            or not x.is_cuda
            or x.dtype not in _KERNEL_DTYPES
            or _ops is None
            or x.numel() == 0
        ):
            return F.instance_norm(
                x,
                self.running_mean,
                self.running_var,
                self.weight,
                self.bias,
                use_input_stats,
                self.momentum if self.momentum is not None else 0.0,
                self.eps,
            )
        if x.size(2) * x.size(3) == 1:
            raise ValueError(f"Expected more than 1 spatial element when training, got input size {x.size()}")
        needs_autograd = torch.is_grad_enabled() and (
            x.requires_grad
            or (self.weight is not None and self.weight.requires_grad)
            or (self.bias is not None and self.bias.requires_grad)
        )
        op = _ops.forward if needs_autograd or torch.compiler.is_compiling() else _ops.infer
        y, stats = op(x, self.weight, self.bias, self.eps)
        if self.running_mean is not None and self.training:
            self._update_running_stats(x, stats)
        return y

    @torch.no_grad()
    def _update_running_stats(self, x, stats):
        # What F.instance_norm does: each instance updates its channel's copy with its own mean and
        # unbiased variance, then the copies are averaged over the batch.
        n, c = x.size(0), x.size(1)
        count = x.size(2) * x.size(3)
        momentum = self.momentum if self.momentum is not None else 0.0
        mean = stats[0].view(n, c)
        var = (stats[1].view(n, c).double().pow(-2) - self.eps) * (count / (count - 1))
        self.running_mean.mul_(1 - momentum).add_(mean.mean(0).to(self.running_mean.dtype), alpha=momentum)
        self.running_var.mul_(1 - momentum).add_(var.mean(0).to(self.running_var.dtype), alpha=momentum)


# --------------------------------------------------------------------------------------------------
# Benchmark-harness entry points (KernelBench format)
# --------------------------------------------------------------------------------------------------
def get_inputs():
    device = "cuda" if torch.cuda.is_available() else None
    return [torch.rand(112, 64, 512, 512, device=device)]


def get_init_inputs():
    return [64]
