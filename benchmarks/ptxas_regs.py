"""Registers and spills of every kernel, from ptxas, without a GPU (development tool).

    python benchmarks/ptxas_regs.py [--arch sm_90] [--match "onchip_kernel<Forward<BF16, Activated"] ... [FILE ...]

Compiles the kernel translation unit of each instance_norm.py given (default: this repository's)
with nvcc -Xptxas -v for one architecture (a few minutes each on two cores; runs in parallel) and
prints, per kernel whose demangled name contains one of the --match strings, its registers and
spill bytes (stores, loads) for each file side by side (--match may be given several times). Register counts set occupancy: the
Activated onchip forward kernel sat at its 64-register cap with spills while the plain one used 42
(benchmarks/NOTES.md, eleventh session). It also warns when the kernel object imports `exit` (a host call of a
__device__-only function, which nvcc compiles silently inside templates). Needs PyTorch, nvcc (CUDA_HOME or
/usr/local/cuda), c++filt and nm.
"""

import argparse
import concurrent.futures
import importlib.util
import os
import re
import subprocess
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def kernel_source(path):
    """The kernel TU as load_extension builds it: the file's own source strings (importing the file
    builds nothing), its namespace placeholder filled in."""
    spec = importlib.util.spec_from_file_location(f"instance_norm_regs_{abs(hash(path))}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return (module._INTERFACE + module._KERNEL_SOURCE).replace("INSTANCE_NORM_NS", "instance_norm_regs")


def ptxas_report(path, source, arch, workdir):
    """{demangled kernel name: (registers, spill store bytes, spill load bytes)} for one file's TU."""
    base = os.path.join(workdir, str(abs(hash(os.path.abspath(path)))))
    with open(base + ".cu", "w") as f:
        f.write(source)
    nvcc = os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "nvcc")
    # --expt-relaxed-constexpr: torch's cpp_extension passes it to every CUDA build (the channels-last
    # kernels call constexpr host functions); --diag-suppress=177 quiets unused-member warnings.
    run = subprocess.run([nvcc, "-O3", "-std=c++17", "--expt-relaxed-constexpr", "--diag-suppress=177",
                          f"-arch={arch}", "-c", base + ".cu", "-o", base + ".o", "-Xptxas", "-v"],
                         capture_output=True, text=True)
    if run.returncode != 0:
        raise RuntimeError(f"{path}: nvcc failed\n{run.stderr[-4000:]}")
    report, name, spills = {}, None, (0, 0)
    for line in run.stderr.splitlines():
        found = re.search(r"Compiling entry function '(\S+)'", line)
        if found:
            name, spills = found.group(1), (0, 0)
            continue
        found = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if found and name:
            spills = (int(found.group(1)), int(found.group(2)))
        found = re.search(r"Used (\d+) registers", line)
        if found and name:
            report[name] = (int(found.group(1)),) + spills
            name = None
    # A host-side call of a __device__-only function compiles without a word inside a template, and its host
    # copy calls exit(1) at run time (thirty-sixth session: a launch that ended the process, status 1, silently).
    # The kernel object then imports `exit`; the kernel code itself never calls it.
    undefined = subprocess.run(["nm", "-u", base + ".o"], capture_output=True, text=True).stdout.split()
    if "exit" in undefined:
        print(f"# WARNING {path}: the kernel object imports exit: a host call of a __device__ function?")
    names = list(report)
    demangled = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True).stdout.split("\n")
    clean = [d.replace("instance_norm_regs::", "").replace("(anonymous namespace)::", "").split("(Params")[0]
             for d in demangled[: len(names)]]
    return {c: report[n] for c, n in zip(clean, names)}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("files", nargs="*", default=[os.path.join(ROOT, "instance_norm.py")])
    parser.add_argument("--arch", default="sm_90")
    parser.add_argument("--match", action="append", default=[],
                        help="repeatable (kernel names hold commas); a kernel is shown when its name contains one")
    args = parser.parse_args()
    matches = args.match
    sources = {path: kernel_source(path) for path in args.files}  # imported here, compiled in parallel
    with tempfile.TemporaryDirectory() as workdir, concurrent.futures.ThreadPoolExecutor() as pool:
        reports = list(pool.map(lambda p: ptxas_report(p, sources[p], args.arch, workdir), args.files))
    print(f"# ptxas -v, {args.arch}: registers (spill store bytes, spill load bytes) per file: "
          + ", ".join(os.path.relpath(p) for p in args.files))
    for kernel in sorted(set().union(*reports)):
        if matches and not any(m in kernel for m in matches):
            continue
        cells = []
        for report in reports:
            regs = report.get(kernel)
            cells.append("-" if regs is None else f"{regs[0]:3d} ({regs[1]}, {regs[2]})")
        print("  ".join(f"{c:>14s}" for c in cells), kernel.replace("void ", ""))


if __name__ == "__main__":
    main()
