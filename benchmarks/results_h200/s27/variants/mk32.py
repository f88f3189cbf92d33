import sys, re
path = sys.argv[1]
s = open(path).read()
helper = '''
// The instance's channel. A 64-bit remainder is a software sequence of about 70 instructions on the GPU,
// a 32-bit one about 15; the instance count fits in 32 bits on any tensor of fewer than 2^31 instances
// (the branch is uniform: one kernel argument decides it).
template <typename T>
__device__ __forceinline__ int64_t channel_of(const Params<T>& p, int64_t instance) {
  if (p.num_instances <= 0x7fffffff) {
    return static_cast<int64_t>(static_cast<uint32_t>(instance) % static_cast<uint32_t>(p.channels));
  }
  return instance % p.channels;
}
'''
anchor = "// Corrected two-sweep statistics of the whole vectors a thread holds."
assert s.count(anchor) == 1
s = s.replace(anchor, helper.lstrip("\n") + "\n" + anchor)
n = s.count("instance % p.channels")
s = s.replace("instance % p.channels", "channel_of(p, instance)")
print(path, "replaced", n)
open(path, "w").write(s)
