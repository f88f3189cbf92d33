"""Compile the kernel TU of two instance_norm.py files (no GPU) and compare the SASS of matching kernels
(cuobjdump from triton's bundled CUDA tools; twenty-first session, the final review). Run from the repository root."""
import sys, os, subprocess, re, concurrent.futures
import triton
CUOBJDUMP = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
sys.path.insert(0, "benchmarks")  # ptxas_regs.kernel_source
from ptxas_regs import kernel_source
def build(path, tag):
    base = f"/tmp/sass_{os.getpid()}_{tag}"  # unique: two comparisons may run at once
    open(base + ".cu", "w").write(kernel_source(path))
    subprocess.run(["/usr/local/cuda/bin/nvcc", "-O3", "-std=c++17", "--expt-relaxed-constexpr", "--diag-suppress=177",
                    "-arch=sm_90", "-cubin", base + ".cu", "-o", base + ".cubin"], check=True, capture_output=True)
    out = subprocess.run([CUOBJDUMP, "-sass", base + ".cubin"], capture_output=True, text=True, check=True).stdout
    out = re.sub(r"_GLOBAL__N__\w*?_cu_[0-9a-f]+", "ANON", out)
    funcs, name, body = {}, None, []
    for line in out.splitlines():
        m = re.match(r"\s+Function : (\S+)", line)
        if m:
            if name: funcs[name] = body
            name, body = m.group(1), []
        elif name:
            body.append(re.sub(r"/\*[0-9a-f]{4}\*/", "", line).strip())
    if name: funcs[name] = body
    return funcs
with concurrent.futures.ThreadPoolExecutor(2) as ex:
    a, b = ex.map(lambda t: build(*t), [(sys.argv[1], "a"), (sys.argv[2], "b")])
same = diff = 0
for n in sorted(set(a) | set(b)):
    if a.get(n) == b.get(n): same += 1
    else:
        diff += 1; print("DIFF", n[:160])
print(f"{same} kernels identical SASS, {diff} differ, of {len(set(a)|set(b))}")
import difflib
for n in sorted(set(a) | set(b)):
    if a.get(n) != b.get(n):
        d = list(difflib.unified_diff(a.get(n, []), b.get(n, []), lineterm="", n=0))
        print(n[:120], len(a.get(n, [])), len(b.get(n, [])), "diff lines", len(d))
        print("\n".join(d[:30]))
        break
