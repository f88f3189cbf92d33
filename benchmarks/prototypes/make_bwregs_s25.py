"""Twenty-first session: the onchip whole-group path from registers for the backward too (prototype).
Writes .scratch/bw32.py and .scratch/bw64.py from instance_norm.py: the register-held path taken when all
inputs' values a thread (x and dy: 2 * K * kVec) are at most 32 or 64."""
import pathlib
src = pathlib.Path("instance_norm.py").read_text()
old_if = "    if constexpr (Op::kInputs == 1 && K * kVec <= kOnchipRegisterValues) {"
old_load = ("      uint4 regs[1][K];\n      const uint4* src = reinterpret_cast<const uint4*>(Op::input(p, 0) + mine);\n#pragma unroll\n"
            "      for (int k = 0; k < K; ++k) regs[0][k] = active ? src[k * G] : make_uint4(0, 0, 0, 0);\n")
new_load = ("      uint4 regs[Op::kInputs][K];\n#pragma unroll\n      for (int t = 0; t < Op::kInputs; ++t) {\n"
            "        const uint4* src = reinterpret_cast<const uint4*>(Op::input(p, t) + mine);\n#pragma unroll\n"
            "        for (int k = 0; k < K; ++k) regs[t][k] = active ? src[k * G] : make_uint4(0, 0, 0, 0);\n      }\n")
assert src.count(old_if) == 1 and src.count(old_load) == 1
for n in (32, 64):
    new_if = (f"    if constexpr (Op::kInputs * K * kVec <= (Op::kInputs == 1 ? kOnchipRegisterValues : {n})) {{")
    pathlib.Path(f".scratch/bw{n}.py").write_text(src.replace(old_if, new_if).replace(old_load, new_load))
print("wrote bw32.py bw64.py")
