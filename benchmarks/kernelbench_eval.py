#!/usr/bin/env python3
"""Run KernelBench's own evaluation of instance_norm.py (level 1, problem 34) on a CUDA machine
that has no internet access.

What it runs, per precision (fp32, bf16):

  (a) KernelBench's static checker, ``validate_kernel_static(code, backend, precision)`` from
      ``src/kernelbench/kernel_static_checker.py`` (loaded by path: standard library only), and
      prints valid / errors / warnings.
  (b) KernelBench's real ``scripts/run_and_check.py``, in a subprocess, with its real command line
      (pydra ``key=value`` arguments, its own defaults for everything not listed):

        python scripts/run_and_check.py ref_origin=kernelbench dataset_src=local level=1 \\
            problem_id=34 kernel_src_path=/abs/instance_norm.py eval_mode=local \\
            precision=fp32 "gpu_arch=['Hopper']" build_dir_prefix=/tmp/kb_eval/build

      That one script does the correctness check and the kernel timing
      (``kernelbench.eval.eval_kernel_against_ref``: 5 correctness trials, 100 timed trials,
      cuda_event timing with an L2 flush before each trial) and
  (c) the reference timing, eager and ``torch.compile`` (inductor, mode "default"), through
      ``kernelbench.timing.measure_ref_program_time`` with the same trial count, the function
      KernelBench's baseline scripts use, and prints the speedups as
      ``ref_mean_ms / kernel_mean_ms`` (means rounded to 3 significant digits by
      ``get_timing_stats``). This driver parses those lines and prints a summary table.

  ``--quick`` passes ``num_correct_trials=1 num_perf_trials=10`` instead of the defaults (5, 100).

Only KernelBench's defaults that would break this run are overridden, each for a stated reason:
  * ``dataset_src=local``: the default ("huggingface") needs the ``datasets`` package and the
    network; the local file KernelBench/level1/34_InstanceNorm.py is the same problem.
  * ``gpu_arch=['<detected>']``: the default is ['Ada'], which sets TORCH_CUDA_ARCH_LIST=Ada, so
    on an H100/H200 the extension would be built for sm_89 (+PTX) and the sm_90-only code paths
    (thread block clusters, bulk copies) would be compiled out. Detected from the GPU
    (9.x -> Hopper); ``--gpu-arch`` overrides.
  * ``check_kernel``: KernelBench's default (True) is run first. If its static gate stops the run
    (an ``AssertionError: Static check failed``), the same command is run again with
    ``check_kernel=False`` so the correctness and timing results still appear; the table says so.
    ``--check-kernel on`` skips that second run, ``--check-kernel off`` runs only the second one.

Mode: the real ``scripts/run_and_check.py`` via subprocess (the default). ``--direct`` instead runs
a line-for-line copy of run_and_check.py's ``eval_mode=local`` branch in a child process (same
KernelBench functions, same arguments, same printed lines); use it only if the real script cannot
start (e.g. pydra or modal fail to import).

Offline dependencies: ``.kb/`` (made on a machine with internet; git-ignored) holds
  .kb/KernelBench/   the needed files of github.com/ScalingIntelligence/KernelBench at the commit
                     in .kb/KernelBench/COMMIT, in the repository's own layout
  .kb/whl/           wheels (cp312 manylinux x86_64 or pure Python) of what the device lacks:
                     pydra-config, dill, python-dotenv, pydantic(+core, annotated-types,
                     typing-inspection, typing-extensions), openai(+jiter, distro, sniffio),
                     modal(+synchronicity, grpclib, h2, hpack, hyperframe, toml, types-*,
                     watchfiles, cbor2)
  .kb/stubs/         import-only stand-ins. litellm is always stubbed (its wheel is 44 MB): it is
                     imported by kernelbench/utils.py for LLM sampling and never called by
                     evaluation. openai and modal stand-ins are put on the path only if the real
                     carried packages fail to import (the driver says which).
The wheels are installed with
  python3 -m pip install -q --no-index --no-deps --upgrade --target /tmp/kbsite .kb/whl/*.whl
and /tmp/kbsite is put on the child's PYTHONPATH (before site-packages).

Usage (from the repository root, on the GPU machine):
  python3 benchmarks/kernelbench_eval.py --kb .kb --precision fp32
  python3 benchmarks/kernelbench_eval.py --kb .kb --precision bf16
  python3 benchmarks/kernelbench_eval.py --kb .kb --precision fp32 bf16 --json /tmp/kb.json
  python3 benchmarks/kernelbench_eval.py --kb .kb --precision fp32 --quick
  python3 benchmarks/kernelbench_eval.py --kb .kb --static-only       # no GPU needed

With KernelBench cloned (and its dependencies installed, e.g. ``uv sync``), the equivalent is:
  uv run python scripts/run_and_check.py ref_origin=kernelbench level=1 problem_id=34 \\
      kernel_src_path=/abs/path/instance_norm.py eval_mode=local precision=fp32 \\
      "gpu_arch=['Hopper']" dataset_src=local check_kernel=False

Exit code: 0 when every requested precision compiled and passed KernelBench's correctness check;
1 otherwise; 2 on a set-up error. With ``--strict-static`` a static-check error also gives 1.
"""

import argparse
import ast
import datetime
import glob
import importlib.util
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_KB = os.path.join(REPO_ROOT, ".kb")
DEFAULT_KERNEL = os.path.join(REPO_ROOT, "instance_norm.py")
LEVEL = 1
PROBLEM_ID = 34
PROBLEM_FILE = "34_InstanceNorm.py"
STUBBABLE = ("litellm", "openai", "modal")  # imported by KernelBench but unused by local evaluation
# what KernelBench's scripts import, for the version print
REPORTED = ("torch", "triton", "numpy", "pydra", "pydantic", "pydantic_core", "dotenv", "tqdm",
            "requests", "openai", "modal", "litellm")


# --------------------------------------------------------------------------------------------
# paths and environment
# --------------------------------------------------------------------------------------------
def kb_paths(kb):
    root = os.path.join(kb, "KernelBench")
    return {
        "kb": kb,
        "root": root,
        "src": os.path.join(root, "src"),
        "script": os.path.join(root, "scripts", "run_and_check.py"),
        "checker": os.path.join(root, "src", "kernelbench", "kernel_static_checker.py"),
        "problem": os.path.join(root, "KernelBench", f"level{LEVEL}", PROBLEM_FILE),
        "whl": os.path.join(kb, "whl"),
        "stubs": os.path.join(kb, "stubs"),
        "timing": os.path.join(root, "results", "timing"),
        "commit": os.path.join(root, "COMMIT"),
    }


def install_wheels(python, whl_dir, site):
    wheels = sorted(glob.glob(os.path.join(whl_dir, "*.whl")))
    if not wheels:
        print(f"[env] no wheels in {whl_dir}; relying on what is installed")
        return
    marker = os.path.join(site, ".kb_wheels")
    tag = f"{sys.version_info[0]}.{sys.version_info[1]}\n" + "\n".join(os.path.basename(w) for w in wheels)
    if os.path.exists(marker):
        with open(marker) as f:
            if f.read() == tag:
                print(f"[env] {len(wheels)} carried wheels already installed in {site}")
                return
    cmd = [python, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--upgrade",
           "--disable-pip-version-check", "--target", site] + wheels
    print(f"[env] installing {len(wheels)} carried wheels into {site}")
    res = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out = "\n".join(line for line in res.stdout.splitlines() if "WARNING" not in line)
    if res.returncode != 0:
        print(out)
        raise SystemExit(f"[env] pip install --target {site} failed (rc={res.returncode})")
    os.makedirs(site, exist_ok=True)
    with open(marker, "w") as f:
        f.write(tag)


def child_env(paths, site, stubbed):
    env = os.environ.copy()
    parts = [os.path.join(paths["stubs"], m) for m in stubbed]
    parts += [site, paths["src"]]
    if env.get("PYTHONPATH"):
        parts.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(parts)
    env["PYTHONUNBUFFERED"] = "1"
    # nothing may reach for the network: no hub look-ups, no litellm price-map download
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("HF_DATASETS_OFFLINE", "1")
    env.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    env.setdefault("DO_NOT_TRACK", "1")
    return env


def try_import(python, env, stmt, cwd):
    res = subprocess.run([python, "-c", stmt], env=env, cwd=cwd, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
    return res.returncode == 0, res.stdout.strip()


def resolve_stubs(python, paths, site, cwd):
    """Which of litellm/openai/modal need the import-only stand-in (only those that fail)."""
    stubbed = []
    for mod in STUBBABLE:
        ok, out = try_import(python, child_env(paths, site, stubbed), f"import {mod}", cwd)
        if ok:
            print(f"[env] {mod}: real package imports")
        else:
            last = out.splitlines()[-1] if out else "?"
            stubbed.append(mod)
            print(f"[env] {mod}: does not import ({last}); using the import-only stand-in .kb/stubs/{mod}")
    return stubbed


def report_versions(python, env, cwd):
    code = (
        "import importlib, sys\n"
        f"for m in {REPORTED!r}:\n"
        "    try:\n"
        "        mod = importlib.import_module(m)\n"
        "        stub = ' (import-only stand-in)' if getattr(mod, '__kernelbench_offline_stub__', False) else ''\n"
        "        v = getattr(mod, '__version__', None) or getattr(mod, 'VERSION', None) or ''\n"
        "        print(f'[env]   {m:14s} {v}{stub}  {getattr(mod, \"__file__\", \"\")}')\n"
        "    except Exception as e:\n"
        "        print(f'[env]   {m:14s} NOT IMPORTABLE: {type(e).__name__}: {e}')\n"
        "import kernelbench.eval, kernelbench.timing, kernelbench.dataset, kernelbench.kernel_static_checker\n"
        "print('[env]   kernelbench    ', kernelbench.__file__)\n"
        "print('[env]   python         ', sys.version.split()[0], sys.executable)\n"
    )
    res = subprocess.run([python, "-c", code], env=env, cwd=cwd, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
    print(res.stdout.rstrip())
    return res.returncode == 0


# --------------------------------------------------------------------------------------------
# GPU architecture for KernelBench's gpu_arch (it sets TORCH_CUDA_ARCH_LIST from it)
# --------------------------------------------------------------------------------------------
def arch_name(major, minor):
    if major == 9:
        return "Hopper"
    if major in (10, 11, 12):
        return "Blackwell"
    if (major, minor) == (8, 9):
        return "Ada"
    if major == 8:
        return "Ampere"
    if (major, minor) == (7, 5):
        return "Turing"
    if major == 7:
        return "Volta"
    if major == 6:
        return "Pascal"
    return None


def detect_gpu_arch(python, env, cwd):
    cap = None
    ok, out = try_import(python, env, "import torch; print('%d.%d' % torch.cuda.get_device_capability(0))", cwd)
    if ok and re.fullmatch(r"\d+\.\d+", out.splitlines()[-1]):
        cap = out.splitlines()[-1]
    else:
        try:
            res = subprocess.run(["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"],
                                 stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, timeout=60)
            first = res.stdout.strip().splitlines()[0] if res.stdout.strip() else ""
            if re.fullmatch(r"\d+\.\d+", first):
                cap = first
        except Exception as e:  # no nvidia-smi: handled below
            print(f"[env] nvidia-smi: {e}")
    if cap is None:
        return None, None
    major, minor = (int(x) for x in cap.split("."))
    return arch_name(major, minor), cap


# --------------------------------------------------------------------------------------------
# (a) static checker
# --------------------------------------------------------------------------------------------
def load_static_checker(path):
    spec = importlib.util.spec_from_file_location("kernelbench_kernel_static_checker", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def run_static_check(checker, code, backend, precision):
    valid, errors, warnings = checker.validate_kernel_static(code, backend=backend, precision=precision)
    print(f"[static] validate_kernel_static(backend={backend!r}, precision={precision!r})")
    print(f"[static]   valid    = {valid}")
    print(f"[static]   errors   = {errors}")
    print(f"[static]   warnings = {warnings}")
    return {"valid": bool(valid), "errors": list(errors), "warnings": list(warnings)}


# --------------------------------------------------------------------------------------------
# (b)+(c) run_and_check.py in a subprocess
# --------------------------------------------------------------------------------------------
def run_and_check_args(kernel, precision, arch, args, build_prefix, check_kernel):
    a = ["ref_origin=kernelbench", "dataset_src=local", f"level={LEVEL}", f"problem_id={PROBLEM_ID}",
         f"kernel_src_path={kernel}", "eval_mode=local", f"precision={precision}",
         f"gpu_arch=['{arch}']", f"build_dir_prefix={build_prefix}"]
    if args.backend != "cuda":
        a.append(f"backend={args.backend}")
    if args.timing_method != "cuda_event":
        a.append(f"timing_method={args.timing_method}")
    if args.quick:
        a += ["num_correct_trials=1", "num_perf_trials=10"]
    if not check_kernel:
        a.append("check_kernel=False")
    if args.verbose:
        a.append("verbose=True")
    return a


def run_streaming(cmd, env, cwd, log_path, timeout):
    print("$ " + shlex.join(cmd), flush=True)
    lines = []
    with open(log_path, "w") as log:
        log.write("$ " + shlex.join(cmd) + "\n")
        proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, bufsize=1, start_new_session=True)

        def pump():
            for line in proc.stdout:
                lines.append(line)
                log.write(line)
                sys.stdout.write("  | " + line)
                sys.stdout.flush()

        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        timed_out = False
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            print(f"[run] timed out after {timeout} s; stopping the child's process group {proc.pid}")
            for sig in (signal.SIGTERM, signal.SIGKILL):
                try:
                    os.killpg(proc.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    proc.wait(timeout=15)
                    break
                except subprocess.TimeoutExpired:
                    continue
            rc = proc.returncode if proc.returncode is not None else -9
        reader.join(timeout=30)
    return rc, "".join(lines), timed_out


def _num(pattern, text):
    m = re.search(pattern, text)
    if not m:
        return None
    try:
        return float(m.group(1))
    except ValueError:
        return None


def parse_output(text):
    r = {}
    m = re.search(r"\[Eval\] Kernel eval result: (.*)", text)
    ev = m.group(1) if m else ""
    r["eval_result"] = ev or None
    if ev:
        r["compiled"] = "compiled=True" in ev
        r["correctness"] = "correctness=True" in ev
        r["kernel_mean_ms_eval"] = _num(r"(?<![\w])runtime=(-?[0-9.eE+-]+)", ev)
        r["eval_ref_mean_ms"] = _num(r"(?<![\w])ref_runtime=(-?[0-9.eE+-]+)", ev)
        t = re.search(r"'correctness_trials': '\((\d+) / (\d+)\)'", ev)
        r["correctness_trials"] = f"{t.group(1)}/{t.group(2)}" if t else None
        h = re.search(r"'hardware': '([^']*)'", ev)
        r["hardware"] = h.group(1) if h else None
        r["excessive_speedup_flag"] = "'excessive_speedup': True" in ev
        for key, pat in (("kernel_stats", r"(?<!ref_)runtime_stats=(\{[^{}]*\})"),
                         ("eval_ref_stats", r"ref_runtime_stats=(\{[^{}]*\})")):
            s = re.search(pat, ev)
            if s:
                try:
                    r[key] = ast.literal_eval(s.group(1))
                except Exception:
                    r[key] = s.group(1)
        for key in ("compilation_error", "runtime_error", "correctness_issue", "max_difference",
                    "avg_difference", "other_error", "cuda_error"):
            e = re.search(r"'" + key + r"""': (\[[^\]]*\]|'[^']*'|"[^"]*"|\w+\((?:'[^']*'|"[^"]*")\)|[^,}]*)""", ev)
            if e:
                r[key] = e.group(1)[:300]
    r["eager_mean_ms"] = _num(r"\[Timing\] PyTorch Reference Eager exec time: (\S+) ms", text)
    r["compile_mean_ms"] = _num(r"\[Timing\] PyTorch Reference torch\.compile time: (\S+) ms", text)
    r["kernel_mean_ms"] = _num(r"\[Timing\] Custom Kernel exec time: (\S+) ms", text)
    r["speedup_eager"] = _num(r"\[Speedup\] Speedup over eager: ([0-9.]+)x", text)
    r["speedup_compile"] = _num(r"\[Speedup\] Speedup over torch\.compile: ([0-9.]+)x", text)
    sf = re.search(r"AssertionError: Static check failed\. (.*)", text)
    r["static_gate_failed"] = sf.group(1) if sf else None
    return r


# --------------------------------------------------------------------------------------------
# --direct: the eval_mode=local branch of run_and_check.py, copied, in a child process
# --------------------------------------------------------------------------------------------
def direct_child(ns):
    """Mirror of scripts/run_and_check.py main() for ref_origin=kernelbench, eval_mode=local."""
    import shutil  # noqa: F401  (as in run_and_check.py)
    import torch
    from kernelbench import eval as kernel_eval
    from kernelbench import utils as kernel_utils
    from kernelbench.dataset import construct_kernelbench_dataset
    from kernelbench.kernel_static_checker import validate_kernel_static
    from kernelbench.timing import measure_ref_program_time
    from kernelbench.utils import read_file

    torch.set_printoptions(precision=4, threshold=10)
    config = {
        "ref_origin": "kernelbench", "dataset_src": "local", "level": LEVEL, "problem_id": PROBLEM_ID,
        "kernel_src_path": ns.kernel, "eval_mode": "local",
        "num_correct_trials": ns.num_correct_trials, "num_perf_trials": ns.num_perf_trials,
        "verbose": ns.verbose, "measure_performance": True, "timing_method": ns.timing_method,
        "build_dir_prefix": ns.build_prefix, "clear_cache": False, "gpu_arch": [ns.gpu_arch],
        "precision": ns.precision, "backend": ns.backend, "check_kernel": ns.check_kernel,
    }
    print("Running with config (direct mode)", config)
    dataset = construct_kernelbench_dataset(level=LEVEL, source="local")
    problem = dataset.get_problem_by_id(PROBLEM_ID)
    ref_arch_src = problem.code
    print(f"Fetched problem {problem.problem_id} from KernelBench level {problem.level}: {problem.name}")
    kernel_src = read_file(ns.kernel)
    if config["check_kernel"]:
        ok, errors, warnings = validate_kernel_static(kernel_src, backend=ns.backend, precision=ns.precision)
        assert ok, f"Static check failed. Errors: {errors}. Warnings: {warnings}"
        if warnings:
            print(f"[WARN] Static check warnings: {warnings}")
    device = torch.device("cuda:0")
    kernel_utils.set_gpu_arch(config["gpu_arch"])
    print("[INFO] Evaluating kernel against reference code (LOCAL)")
    build_dir = os.path.join(config["build_dir_prefix"], "test_build", str(hash(kernel_src)))
    try:  # as evaluate_single_sample_src() in run_and_check.py
        result = kernel_eval.eval_kernel_against_ref(
            original_model_src=ref_arch_src, custom_model_src=kernel_src,
            measure_performance=True, timing_method=ns.timing_method, verbose=ns.verbose,
            num_correct_trials=ns.num_correct_trials, num_perf_trials=ns.num_perf_trials,
            build_dir=build_dir, device=device, backend=ns.backend,
            precision=kernel_eval.get_torch_dtype_from_string(ns.precision))
    except Exception as e:
        print(f"[WARNING] Last level catch: Some issue evaluating for kernel: {e} ")
        key = "cuda_error" if "CUDA error" in str(e) else "other_error"
        metadata = {key: (f"CUDA Error: {e}" if key == "cuda_error" else f"error: {e}"),
                    "hardware": torch.cuda.get_device_name(device=device), "device": str(device)}
        result = kernel_eval.KernelExecResult(compiled=False, correctness=False, metadata=metadata)
    kernel_time = result.runtime
    print("[INFO] Measuring reference program time")
    eager = measure_ref_program_time(ref_arch_name="Reference Program", ref_arch_src=ref_arch_src,
                                     num_trials=ns.num_perf_trials, use_torch_compile=False,
                                     timing_method=ns.timing_method, device=device, verbose=False,
                                     precision=ns.precision)
    comp = measure_ref_program_time(ref_arch_name="Reference Program", ref_arch_src=ref_arch_src,
                                    num_trials=ns.num_perf_trials, use_torch_compile=True,
                                    timing_method=ns.timing_method, device=device, verbose=False,
                                    precision=ns.precision)
    eager_t = eager.get("mean", None)
    comp_t = comp.get("mean", None)
    print("=" * 40)
    print(f"[Eval] Kernel eval result: {result}")
    print("-" * 40)
    print(f"[Timing] PyTorch Reference Eager exec time: {eager_t} ms")
    print(f"[Timing] PyTorch Reference torch.compile time: {comp_t} ms")
    print(f"[Timing] Custom Kernel exec time: {kernel_time} ms")
    print("-" * 40)
    if result.correctness:
        print(f"[Speedup] Speedup over eager: {eager_t / kernel_time:.2f}x")
        print(f"[Speedup] Speedup over torch.compile: {comp_t / kernel_time:.2f}x")
    else:
        print("[Speedup] Speedup Not Available as Kernel did not pass correctness")
    print("=" * 40)


def direct_args(kernel, precision, arch, args, build_prefix, check_kernel):
    ncorrect, nperf = (1, 10) if args.quick else (5, 100)
    a = ["--_direct-child", "--kernel", kernel, "--precision", precision, "--gpu-arch", arch,
         "--backend", args.backend, "--timing-method", args.timing_method,
         "--_build-prefix", build_prefix, "--_num-correct-trials", str(ncorrect),
         "--_num-perf-trials", str(nperf), "--_check-kernel", "1" if check_kernel else "0"]
    if args.verbose:
        a.append("--verbose")
    return a


# --------------------------------------------------------------------------------------------
# summary
# --------------------------------------------------------------------------------------------
def stored_baselines(paths):
    out = {}
    for label, name in (("eager", "baseline_time_torch.json"),
                        ("compile", "baseline_time_torch_compile_inductor_default.json")):
        p = os.path.join(paths["timing"], "H100_Modal", name)
        try:
            with open(p) as f:
                out[label] = json.load(f)[f"level{LEVEL}"].get(PROBLEM_FILE)
        except Exception:
            out[label] = None
    return out


def fmt(x, nd=3):
    if x is None:
        return "-"
    if isinstance(x, bool):
        return "yes" if x else "NO"
    if isinstance(x, float):
        return f"{x:.{nd}f}" if abs(x) < 1000 else f"{x:.0f}"
    return str(x)


def print_table(rows, headers):
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    line = "| " + " | ".join(h.ljust(w) for h, w in zip(headers, widths)) + " |"
    print(line)
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for r in rows:
        print("| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |")


def summarize(results, paths, args):
    print()
    print("=" * 100)
    commit = open(paths["commit"]).read().strip() if os.path.exists(paths["commit"]) else "?"
    print(f"KernelBench level {LEVEL} problem {PROBLEM_ID} ({PROBLEM_FILE}) at KernelBench commit {commit[:12]}")
    print(f"kernel: {args.kernel}   mode: {'direct (copy of run_and_check local branch)' if args.direct else 'scripts/run_and_check.py'}"
          f"   trials: {'1 correctness / 10 timed (--quick)' if args.quick else '5 correctness / 100 timed (KernelBench defaults)'}"
          f"   timing: {args.timing_method}")
    hw = next((r["run"].get("hardware") for r in results if r.get("run") and r["run"].get("hardware")), None)
    print(f"hardware: {hw or '?'}   gpu_arch passed: {results[0].get('gpu_arch') if results else '?'}")
    headers = ["precision", "static valid", "static gate", "compiled", "correct", "kernel ms",
               "eager ms", "compile ms", "x eager", "x compile", "eval ref ms", "notes"]
    rows = []
    for r in results:
        st = r["static"]
        run = r.get("run") or {}
        notes = []
        if st["errors"]:
            notes.append("static errors: " + "; ".join(st["errors"]))
        if r.get("rerun_without_check"):
            notes.append("numbers from the re-run with check_kernel=False")
        if run.get("excessive_speedup_flag"):
            notes.append("KernelBench flagged excessive speedup")
        for k in ("compilation_error", "runtime_error", "correctness_issue", "max_difference", "other_error", "cuda_error"):
            if run.get(k):
                notes.append(f"{k}={run[k]}")
        if r.get("timed_out"):
            notes.append("TIMED OUT")
        if r.get("rc") not in (0, None):
            notes.append(f"rc={r['rc']}")
        gate = r.get("gate", "-")
        k_ms = run.get("kernel_mean_ms")
        e_ms, c_ms = run.get("eager_mean_ms"), run.get("compile_mean_ms")
        rows.append([
            r["precision"], fmt(st["valid"]), gate,
            fmt(run.get("compiled")) if "compiled" in run else "-",
            (fmt(run.get("correctness")) + (f" ({run['correctness_trials']})" if run.get("correctness_trials") else ""))
            if "correctness" in run else "-",
            fmt(k_ms), fmt(e_ms), fmt(c_ms),
            (f"{run['speedup_eager']:.2f}" if run.get("speedup_eager") is not None else "-"),
            (f"{run['speedup_compile']:.2f}" if run.get("speedup_compile") is not None else "-"),
            fmt(run.get("eval_ref_mean_ms")),
            "; ".join(notes) or "-",
        ])
    print_table(rows, headers)
    print("kernel/eager/compile ms: means over the timed trials (3 significant digits, KernelBench's get_timing_stats);")
    print("x eager / x compile: run_and_check.py's printed speedups (ref mean / kernel mean, 2 decimals);")
    print("eval ref ms: the eager reference as timed inside eval_kernel_against_ref (its excessive-speedup check).")
    base = stored_baselines(paths)
    if base.get("eager") or base.get("compile"):
        e = base.get("eager") or {}
        c = base.get("compile") or {}
        print(f"for context only (not used by run_and_check): KernelBench's stored H100_Modal baselines for "
              f"{PROBLEM_FILE}: eager {e.get('mean')} ms, torch.compile {c.get('mean')} ms "
              f"(results/timing/README.md: recorded with an older PyTorch)")
    print("=" * 100)


# --------------------------------------------------------------------------------------------
def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kb", default=DEFAULT_KB, help="the .kb folder (KernelBench files, wheels, stubs)")
    ap.add_argument("--precision", nargs="+", default=["fp32"], choices=["fp32", "bf16", "fp16"])
    ap.add_argument("--kernel", default=DEFAULT_KERNEL, help="submission file (default: instance_norm.py)")
    ap.add_argument("--quick", action="store_true", help="num_correct_trials=1 num_perf_trials=10")
    ap.add_argument("--gpu-arch", default="auto", help="KernelBench gpu_arch name (Hopper, Ada, ...); auto: from the GPU")
    ap.add_argument("--backend", default="cuda")
    ap.add_argument("--timing-method", default="cuda_event",
                    choices=["cuda_event", "do_bench", "do_bench_impl", "host_time"])
    ap.add_argument("--check-kernel", default="default", choices=["default", "on", "off"],
                    help="default: KernelBench's check_kernel=True, re-run with False if its static gate stops the "
                         "run; on: no re-run; off: only check_kernel=False")
    ap.add_argument("--direct", action="store_true",
                    help="run a copy of run_and_check.py's local branch instead of the script itself")
    ap.add_argument("--static-only", action="store_true", help="only (a): the static checker (no GPU)")
    ap.add_argument("--strict-static", action="store_true", help="a static-check error makes the exit code 1")
    ap.add_argument("--site", default="/tmp/kbsite", help="where the carried wheels are installed")
    ap.add_argument("--work-dir", default="/tmp/kb_eval", help="cwd, extension builds and logs of the runs")
    ap.add_argument("--json", default=None, help="write the parsed results here")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds per run_and_check.py invocation")
    ap.add_argument("--verbose", action="store_true", help="pass verbose=True to KernelBench")
    # internal: the --direct child
    ap.add_argument("--_direct-child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--_build-prefix", default="", help=argparse.SUPPRESS)
    ap.add_argument("--_num-correct-trials", type=int, default=5, help=argparse.SUPPRESS)
    ap.add_argument("--_num-perf-trials", type=int, default=100, help=argparse.SUPPRESS)
    ap.add_argument("--_check-kernel", default="1", help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args._direct_child:
        ns = argparse.Namespace(kernel=args.kernel, precision=args.precision[0], gpu_arch=args.gpu_arch,
                                backend=args.backend, timing_method=args.timing_method,
                                build_prefix=args._build_prefix, num_correct_trials=args._num_correct_trials,
                                num_perf_trials=args._num_perf_trials, check_kernel=args._check_kernel == "1",
                                verbose=args.verbose)
        direct_child(ns)
        return 0

    kb = os.path.abspath(args.kb)
    args.kernel = os.path.abspath(args.kernel)
    paths = kb_paths(kb)
    for key in ("script", "checker", "problem"):
        if not os.path.exists(paths[key]):
            print(f"[env] missing {paths[key]}: is --kb pointing at the prepared .kb folder?")
            return 2
    if not os.path.exists(args.kernel):
        print(f"[env] missing kernel file {args.kernel}")
        return 2
    with open(args.kernel) as f:
        kernel_src = f.read()
    print(f"[env] {datetime.datetime.now().isoformat(timespec='seconds')}  kb={kb}  kernel={args.kernel}")
    if os.path.exists(paths["commit"]):
        print(f"[env] KernelBench commit {open(paths['commit']).read().strip()}")

    # (a) static checker, for every requested precision (standard library only)
    checker = load_static_checker(paths["checker"])
    static = {p: run_static_check(checker, kernel_src, args.backend, p) for p in args.precision}
    if args.static_only:
        ok = all(s["valid"] for s in static.values())
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"static": static}, f, indent=2)
        return 0 if ok else 1

    python = sys.executable
    work = os.path.abspath(args.work_dir)
    logs = os.path.join(work, "logs")
    build_prefix = os.path.join(work, "build")
    os.makedirs(logs, exist_ok=True)
    os.makedirs(build_prefix, exist_ok=True)

    install_wheels(python, paths["whl"], args.site)
    stubbed = resolve_stubs(python, paths, args.site, work)
    env = child_env(paths, args.site, stubbed)
    if not report_versions(python, env, work):
        print("[env] KernelBench's modules do not import with the carried packages (see above)")
        if not args.direct:
            return 2

    arch = args.gpu_arch
    if arch == "auto":
        arch, cap = detect_gpu_arch(python, env, work)
        if arch is None:
            print("[env] could not read the GPU's compute capability (no CUDA device?); pass --gpu-arch")
            return 2
        print(f"[env] GPU compute capability {cap} -> gpu_arch=['{arch}']")

    results = []
    for precision in args.precision:
        print()
        print(f"##### precision {precision} " + "#" * 70)
        entry = {"precision": precision, "static": static[precision], "gpu_arch": arch}
        attempts = {"default": [True, False], "on": [True], "off": [False]}[args.check_kernel]
        for i, check in enumerate(attempts):
            if i > 0 and not (entry.get("run") or {}).get("static_gate_failed"):
                break  # the first run was not stopped by the static gate: nothing to re-run
            if args.direct:
                cmd = [python, os.path.abspath(__file__)] + direct_args(args.kernel, precision, arch, args,
                                                                        build_prefix, check)
            else:
                cmd = [python, paths["script"]] + run_and_check_args(args.kernel, precision, arch, args,
                                                                     build_prefix, check)
            tag = f"{precision}_check{'on' if check else 'off'}"
            t0 = time.time()
            rc, text, timed_out = run_streaming(cmd, env, work, os.path.join(logs, f"{tag}.log"), args.timeout)
            parsed = parse_output(text)
            entry.update({"rc": rc, "timed_out": timed_out, "seconds": round(time.time() - t0, 1),
                          "command": shlex.join(cmd), "log": os.path.join(logs, f"{tag}.log"), "run": parsed})
            if check:
                entry["gate"] = ("stopped run" if parsed.get("static_gate_failed") else
                                 "passed" if "[INFO] Evaluating kernel against reference code" in text else "?")
                entry["gate_run"] = {"rc": rc, "command": entry["command"], "log": entry["log"],
                                     "static_gate_failed": parsed.get("static_gate_failed")}
            else:
                entry.setdefault("gate", "off")
                entry["rerun_without_check"] = i > 0
            if parsed.get("static_gate_failed"):
                print(f"[run] KernelBench's static gate (check_kernel=True) stopped the run: {parsed['static_gate_failed']}")
                if len(attempts) > i + 1:
                    print("[run] re-running the same command with check_kernel=False to get correctness and timing")
        results.append(entry)

    summarize(results, paths, args)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"kernelbench_commit": open(paths["commit"]).read().strip() if os.path.exists(paths["commit"]) else None,
                       "stubbed": stubbed, "results": results}, f, indent=2, default=str)
        print(f"[out] {args.json}")

    ok = all((r.get("run") or {}).get("compiled") and (r.get("run") or {}).get("correctness") for r in results)
    if args.strict_static and not all(r["static"]["valid"] for r in results):
        ok = False
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
