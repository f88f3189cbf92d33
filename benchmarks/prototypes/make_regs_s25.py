"""Writes the register-held whole-group forward variants (onchip_regs_s25.md) of instance_norm.py into
.scratch: regs.py (float32 up to 32 values a thread, 16-bit up to 16), regs32.py (16-bit up to 32 too),
regs_cs.py (regs with streaming loads). String replacement, so that the device needs no `patch`; it fails
loudly where instance_norm.py no longer matches. Twentieth session, for next_s25.sh."""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
src = open(os.path.join(ROOT, "instance_norm.py")).read()

# The register branch goes in front of the whole-group path's cp.async code, which becomes its `else`
# (left at its indentation: a prototype); one more brace closes that `else` before the general path.
OLD_BRANCH_START = '''    const int64_t mine = start + local * kVec;
#pragma unroll
'''
NEW_BRANCH_START = '''    const int64_t mine = start + local * kVec;
    if constexpr (kOnchipRegisterWhole && Op::kInputs == 1 &&
                  K * kVec <= (sizeof(T) == 4 ? kOnchipRegisterWholeValues32 : kOnchipRegisterWholeValues16)) {
      // PROTOTYPE (onchip_regs_s25): the forward's K vectors in registers, loaded straight from global
      // memory (Inductor's persistent reduction at fp32 (8,512,32,32): a warp per row, 56 registers, no
      // shared memory, 9.12 us under ncu against our 10.75).
      uint4 regs[1][K];
      const uint4* src = reinterpret_cast<const uint4*>(Op::input(p, 0) + mine);
      const int vstride = stride / kVec;
#pragma unroll
      for (int k = 0; k < K; ++k) {
        regs[0][k] = !active                      ? make_uint4(0, 0, 0, 0)
                     : kOnchipRegisterStreamLoads ? __ldcs(src + k * vstride)
                                                  : src[k * vstride];
      }
      s = Op::template thread_partial<K, true>(regs, 0, stride, 0, 0, known);
      s = instance_reduce<true>(s, warp_partials, &cta_partial, G, group, 1);
      if (active) {
        const typename Op::Coef c = Op::coef(p, safe, s, known);
        store_whole<Op, K, false, true>(p, regs, p.out + mine, residual_at<Op>(p, mine), 0, stride, 0, 0, c);
      }
    } else {
#pragma unroll
'''
OLD_BRANCH_END = '''    }
  } else {
    const int M = static_cast<int>(p.instance_size);'''
NEW_BRANCH_END = '''    }
    }
  } else {
    const int M = static_cast<int>(p.instance_size);'''
OLD_HEAD = '''template <class Op, class Addr, int K>
__global__ void __launch_bounds__(Op::kMaxBlock) onchip_kernel('''
NEW_HEAD = '''// PROTOTYPE switches (onchip_regs_s25): the whole-group forward from registers, up to this many values a
// thread (float32; 16-bit types); streaming (evict-first) loads or plain ones. ptxas -v, sm_90 (nvcc
// 13.0): fp32 Identity K=8 44 -> 56 registers, Activated 64 -> 64 (4 / 12 bytes spilled); bf16 K=2
// Identity 46 -> 44, Activated 52 -> 60, no spills; bf16 K=4 (32 values) Identity 41 -> 64 (4 / 4 spilled).
constexpr bool kOnchipRegisterWhole = true;
constexpr int kOnchipRegisterWholeValues32 = 32;
constexpr int kOnchipRegisterWholeValues16 = 16;
constexpr bool kOnchipRegisterStreamLoads = false;

''' + OLD_HEAD


def replace_once(text, old, new):
    if text.count(old) != 1:
        sys.exit(f"make_regs_s25: instance_norm.py no longer matches ({old.splitlines()[0]!r})")
    return text.replace(old, new)


regs = src
for old, new in ((OLD_BRANCH_START, NEW_BRANCH_START), (OLD_BRANCH_END, NEW_BRANCH_END), (OLD_HEAD, NEW_HEAD)):
    regs = replace_once(regs, old, new)
variants = {
    "regs.py": regs,
    "regs32.py": replace_once(regs, "kOnchipRegisterWholeValues16 = 16;", "kOnchipRegisterWholeValues16 = 32;"),
    "regs_cs.py": replace_once(regs, "kOnchipRegisterStreamLoads = false;", "kOnchipRegisterStreamLoads = true;"),
}
os.makedirs(os.path.join(ROOT, ".scratch"), exist_ok=True)
for name, text in variants.items():
    with open(os.path.join(ROOT, ".scratch", name), "w") as f:
        f.write(text)
print("wrote", ", ".join(variants))
