"""Compile the kernel TU of two instance_norm.py files (no GPU) and compare the SASS of matching kernels
(cuobjdump from triton's bundled CUDA tools; twenty-first session, the final review). Run from the repository root."""
import sys, os, subprocess, re, concurrent.futures
CUOBJDUMP = "/root/.pyenv/versions/3.11.7/lib/python3.11/site-packages/triton/backends/nvidia/bin/cuobjdump"
sys.path.insert(0, "benchmarks")
from ptxas_regs import kernel_source
def build(path, tag):
    base = f"/tmp/sass_{tag}"
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
def canon(body):
    seen = {}
    def sub(m):
        return seen.setdefault(m.group(0), f"%v{len(seen)}")
    return [re.sub(r"%[a-z]+\d+", sub, line) for line in body]
bad = [n for n in set(a) | set(b) if a.get(n) != b.get(n) and canon(a.get(n, [])) != canon(b.get(n, []))]
print(f"after renaming virtual registers by first use: {len(bad)} kernels differ")
for n in bad[:3]:
    d = list(difflib.unified_diff(canon(a[n]), canon(b[n]), lineterm="", n=0)); print(n[:120]); print("\n".join(d[:20]))
def iso(x, y):
    if len(x) != len(y): return False
    fwd, back = {}, {}
    tok = re.compile(r"%[a-z]+\d+|[^%]+|%")
    for lx, ly in zip(x, y):
        tx, ty = tok.findall(lx), tok.findall(ly)
        if len(tx) != len(ty): return False
        for u, v in zip(tx, ty):
            if u.startswith("%") and len(u) > 1 and v.startswith("%") and len(v) > 1:
                if fwd.setdefault(u, v) != v or back.setdefault(v, u) != u: return False
            elif u != v: return False
    return True
bad = [n for n in set(a) | set(b) if a.get(n) != b.get(n) and not (n in a and n in b and iso(a[n], b[n]))]
print(f"isomorphic up to a renaming of virtual registers: {36 - len(bad) if len(bad) <= 36 else 0}; not: {len(bad)}", bad[:3])
def first_fail(x, y):
    fwd, back = {}, {}
    tok = re.compile(r"%[a-z]+\d+|[^%]+|%")
    for i, (lx, ly) in enumerate(zip(x, y)):
        tx, ty = tok.findall(lx), tok.findall(ly)
        for u, v in zip(tx, ty):
            if u.startswith("%") and len(u) > 1 and v.startswith("%") and len(v) > 1:
                if fwd.setdefault(u, v) != v or back.setdefault(v, u) != u: return i, lx, ly, fwd.get(u), back.get(v)
            elif u != v: return i, lx, ly
n = bad[1]; print(first_fail(a[n], b[n]))
