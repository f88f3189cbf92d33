"""Tests that need no GPU (they run on CI machines without one, and must not be skipped).

* importing instance_norm without a GPU builds nothing;
* the CUDA extension compiles and links (needs only the CUDA toolkit);
* the CPU path of ModelNew matches nn.InstanceNorm2d (outputs, running stats, state_dict);
* bad inputs raise the same exception types as nn.InstanceNorm2d;
* the benchmark-harness contract, checked from the file text.
"""

import ast
import inspect
import os
import re
import shutil
import subprocess
import sys
import warnings

import pytest
import torch
import torch.nn as nn

from conftest import BAD_CASE_IDS, BAD_CASES, BAD_INPUTS, DTYPE_ERRORS

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# --------------------------------------------------------------------------- helpers

def run_python(code, env, cwd, timeout):
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout,
    )


def find_cuda_home():
    """The CUDA toolkit the compile test uses, or None when there is none."""
    if os.environ.get("CUDA_HOME"):
        return os.environ["CUDA_HOME"]
    if os.path.isdir("/usr/local/cuda"):
        return "/usr/local/cuda"
    from torch.utils.cpp_extension import CUDA_HOME

    return CUDA_HOME


def raised(fn):
    """The exception fn() raises, or None."""
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 - we compare exception types
        return exc
    return None


def make_pair(inorm, num_features, rng, **kwargs):
    """ModelNew and nn.InstanceNorm2d with the same arguments and the same state."""
    ours = inorm.ModelNew(num_features, **kwargs)
    eager = nn.InstanceNorm2d(num_features, **kwargs)
    if ours.affine:
        with torch.no_grad():
            ours.weight.copy_(torch.randn_like(ours.weight))
            ours.bias.copy_(torch.randn_like(ours.bias))
    eager.load_state_dict(ours.state_dict())
    return ours, eager


def random_cpu_input(shape, dtype):
    scale = 10 ** (torch.rand(()).item() * 2 - 1)
    offset = (torch.rand(()).item() - 0.5) * 10 * scale
    return (torch.randn(shape, dtype=torch.float64) * scale + offset).to(dtype)


def assert_same_state(ours, eager):
    ours_state, eager_state = ours.state_dict(), eager.state_dict()
    assert list(ours_state) == list(eager_state)
    for key in eager_state:
        torch.testing.assert_close(ours_state[key], eager_state[key], msg=key)


# --------------------------------------------------------------------------- import / build

def test_import_without_gpu_builds_nothing(tmp_path):
    """With no visible GPU, `import instance_norm` must not call nvcc nor write any build
    output, and cuda_kernels_available() is False.  nvcc is replaced by a fake one that
    leaves a marker file; the extensions dir and the working directory must stay empty."""
    fake_cuda = tmp_path / "fake_cuda"
    (fake_cuda / "bin").mkdir(parents=True)
    marker = tmp_path / "nvcc_was_called"
    nvcc = fake_cuda / "bin" / "nvcc"
    nvcc.write_text(f"#!/bin/sh\ntouch '{marker}'\nexit 1\n")
    nvcc.chmod(0o755)
    ext_dir = tmp_path / "torch_extensions"
    ext_dir.mkdir()
    workdir = tmp_path / "cwd"
    workdir.mkdir()

    env = dict(os.environ)
    env.update(
        CUDA_VISIBLE_DEVICES="",
        CUDA_HOME=str(fake_cuda),
        CUDA_PATH=str(fake_cuda),
        PATH=f"{fake_cuda / 'bin'}{os.pathsep}{env.get('PATH', '')}",
        TORCH_EXTENSIONS_DIR=str(ext_dir),
        PYTHONPATH=ROOT + os.pathsep + env.get("PYTHONPATH", ""),
    )
    env.pop("INSTANCE_NORM_VERBOSE", None)
    code = (
        "import torch, instance_norm\n"
        "print('CUDA', torch.cuda.is_available())\n"
        "print('KERNELS', instance_norm.cuda_kernels_available())\n"
        "print('PLAN', instance_norm.Plan.stream(16, 3))\n"
    )
    # A generous limit that still rules out a build hiding behind the import.
    result = run_python(code, env, cwd=str(workdir), timeout=120)
    assert result.returncode == 0, result.stderr
    assert "CUDA False" in result.stdout, result.stdout
    assert "KERNELS False" in result.stdout, result.stdout
    assert "PLAN Plan(regime='stream'" in result.stdout, result.stdout  # formatting a plan builds nothing
    assert not marker.exists(), "importing instance_norm without a GPU called nvcc"
    assert list(ext_dir.iterdir()) == [], "importing instance_norm wrote build output"
    assert list(workdir.iterdir()) == [], "importing instance_norm wrote into the cwd"


def test_extension_compiles_and_links():
    """load_extension() builds the CUDA source with nvcc and loads it, with or without a
    GPU.  Skipped only when there is no CUDA toolkit at all."""
    cuda_home = find_cuda_home()
    if cuda_home is None:
        pytest.skip("no CUDA toolkit (torch.utils.cpp_extension.CUDA_HOME is None)")
    env = dict(os.environ)
    env["CUDA_HOME"] = cuda_home
    env.setdefault("TORCH_CUDA_ARCH_LIST", "8.0;9.0")
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    code = (
        "import instance_norm\n"
        "ops = instance_norm.load_extension()\n"
        "names = ('forward', 'forward_with_plan', 'describe_plan')\n"
        "print('OPS', all(hasattr(ops, n) for n in names))\n"
        "print('LIBRARY', instance_norm._eager.__file__)\n"
    )
    result = run_python(code, env, cwd=ROOT, timeout=600)
    assert result.returncode == 0, f"build failed:\n{result.stdout[-5000:]}\n{result.stderr[-20000:]}"
    assert "OPS True" in result.stdout, result.stdout + result.stderr[-5000:]
    # A host-side call of a __device__-only function compiles without a diagnostic inside a template, and its
    # host copy calls exit(1): the first launch through it ends the process silently (thirty-sixth session).
    # Nothing else in the extension imports exit.
    nm = shutil.which("nm")
    if nm is not None:
        library = result.stdout.split("LIBRARY ", 1)[1].split()[0]
        undefined = subprocess.run([nm, "-D", "--undefined-only", library], capture_output=True, text=True).stdout
        assert not any(line.split()[-1].split("@")[0] == "exit" for line in undefined.splitlines() if line.split()), (
            f"{library} imports exit: a host call of a __device__ function?")


# --------------------------------------------------------------------------- CPU path

def float64_shadow(module, num_features, **kwargs):
    """nn.InstanceNorm2d in float64 with `module`'s arguments and state: the reference that outputs and
    running statistics are held to (eager float32 is not exact enough to be it)."""
    shadow = nn.InstanceNorm2d(num_features, **dict(kwargs, dtype=torch.float64))
    shadow.load_state_dict({k: v.double() if v.is_floating_point() else v for k, v in module.state_dict().items()})
    return shadow


# Ours against the float64 shadow (the CPU path computes in float64 and rounds once per step):
# (relative, absolute as a fraction of max(1, max|ref|)).
CPU_TOL = {torch.float32: (1e-6, 1e-6), torch.float64: (1e-12, 1e-12)}


def assert_like_eager(got, expected, ref, dtype, what):
    """`got` (ours) has eager's (`expected`) shape and dtype and is within CPU_TOL of the float64
    `ref`, eager's own module in float64. Eager's values in `dtype` are no reference: its float32 is
    off by more than assert_close's default on ill-conditioned instances, as in case (4, 5, 2, 1), H*W
    = 2, inputs offset by up to 5 standard deviations, eps 1e-3 (CI seed 5710984537826788899), which
    failed the old direct comparison while ours was the float64 result rounded. (A bound of ours
    against eager that allows eager's own error follows from this one by the triangle inequality, so
    it is not checked again.)"""
    assert got.shape == expected.shape == ref.shape and got.dtype == expected.dtype == dtype, what
    rel, abs_ = CPU_TOL[dtype]
    ref = ref.double()
    scale = max(1.0, ref.abs().max().item()) if ref.numel() else 1.0
    torch.testing.assert_close(got.double(), ref, rtol=rel, atol=abs_ * scale, msg=f"{what}: against float64")


def assert_state_like_eager(ours, eager, shadow, dtype, what):
    """State dicts: same keys; counters equal; buffers as assert_like_eager has outputs."""
    ours_state, eager_state, ref_state = ours.state_dict(), eager.state_dict(), shadow.state_dict()
    assert list(ours_state) == list(eager_state) == list(ref_state), what
    for key, got in ours_state.items():
        if got.is_floating_point():
            assert_like_eager(got, eager_state[key], ref_state[key], dtype, f"{what}: {key}")
        else:
            assert torch.equal(got, eager_state[key]) and torch.equal(got, ref_state[key]), f"{what}: {key}"


@pytest.mark.parametrize("affine", [False, True], ids=["plain", "affine"])
@pytest.mark.parametrize("track", [False, True], ids=["no_stats", "running_stats"])
def test_cpu_matches_eager(inorm, rng, affine, track):
    """Outputs and running statistics of the CPU path against nn.InstanceNorm2d in float64 (and eager's
    shapes and dtypes in the module's dtype; assert_like_eager)."""
    for case in range(6):
        n, c = rng.randint(1, 4), rng.randint(1, 6)
        h, w = rng.randint(2, 24), rng.randint(1, 24)
        dtype = rng.choice([torch.float32, torch.float64])
        kwargs = dict(
            eps=rng.choice([1e-5, 1e-3]), momentum=rng.choice([0.1, 0.3, None]),
            affine=affine, track_running_stats=track,
        )
        what = f"case {case}: shape={(n, c, h, w)} {kwargs} {dtype}"
        ours, eager = make_pair(inorm, c, rng, dtype=dtype, **kwargs)
        shadow = float64_shadow(ours, c, **kwargs)

        def check(x, step):
            ref = shadow(x.double())
            assert_like_eager(ours(x), eager(x), ref, dtype, f"{what} {step}")
            assert_state_like_eager(ours, eager, shadow, dtype, f"{what} {step}")

        for step in range(3):  # training: outputs and running-stat updates
            check(random_cpu_input((n, c, h, w), dtype), f"train step {step}")
        x3 = random_cpu_input((c, h, w), dtype)  # unbatched 3-D input
        check(x3, "3-D train")

        for module in (ours, eager, shadow):
            module.eval()
        check(random_cpu_input((n, c, h, w), dtype), "eval")
        check(x3, "3-D eval")


@pytest.mark.parametrize("affine", [False, True], ids=["plain", "affine"])
@pytest.mark.parametrize("track", [False, True], ids=["no_stats", "running_stats"])
def test_cpu_state_dict_both_ways(inorm, rng, affine, track):
    c = rng.randint(1, 8)
    kwargs = dict(affine=affine, track_running_stats=track)
    ours = inorm.ModelNew(c, **kwargs)
    eager = nn.InstanceNorm2d(c, **kwargs)
    assert isinstance(ours, nn.InstanceNorm2d)
    assert list(ours.state_dict()) == list(eager.state_dict())

    def randomize(module):
        with torch.no_grad():
            for tensor in module.state_dict().values():
                if tensor.is_floating_point():
                    tensor.copy_(torch.rand_like(tensor) + 0.5)
                else:
                    tensor.fill_(rng.randint(1, 100))

    randomize(eager)
    ours.load_state_dict(eager.state_dict())  # eager -> ours
    assert_same_state(ours, eager)
    randomize(ours)
    eager.load_state_dict(ours.state_dict())  # ours -> eager
    assert_same_state(ours, eager)
    ours.eval()
    eager.eval()
    x = torch.randn(2, c, 5, 7)
    torch.testing.assert_close(ours(x), eager(x))


# --------------------------------------------------------------------------- errors


def check_same_error(ours_module, eager_module, x, name):
    expected = raised(lambda: eager_module(x))
    assert expected is not None, f"{name}: nn.InstanceNorm2d accepted this input"
    got = raised(lambda: ours_module(x))
    assert got is not None, f"{name}: ModelNew accepted an input that eager rejects with {expected!r}"
    if name in DTYPE_ERRORS:
        ok = isinstance(got, type(expected))
    else:
        ok = type(got) is type(expected)
    assert ok, f"{name}: ModelNew raised {type(got).__name__}({got}), eager raised {type(expected).__name__}"


@pytest.mark.parametrize("name,affine", BAD_CASES, ids=BAD_CASE_IDS)
def test_cpu_bad_inputs_raise_like_eager(inorm, rng, name, affine):
    c = rng.randint(1, 6)
    ours, eager = make_pair(inorm, c, rng, affine=affine)
    check_same_error(ours, eager, BAD_INPUTS[name](c, "cpu"), name)


def test_cpu_wrong_channels_without_affine_warns_like_eager(inorm, rng):
    c = rng.randint(1, 6)
    ours, eager = make_pair(inorm, c, rng, affine=False)
    x = torch.randn(2, c + 2, 4, 5)
    with warnings.catch_warnings(record=True) as eager_warnings:
        warnings.simplefilter("always")
        expected = eager(x)
    with warnings.catch_warnings(record=True) as our_warnings:
        warnings.simplefilter("always")
        got = ours(x)
    assert eager_warnings, "nn.InstanceNorm2d no longer warns here"
    categories = {w.category for w in our_warnings}
    assert eager_warnings[0].category in categories, [str(w.message) for w in our_warnings]
    torch.testing.assert_close(got, expected)


# --------------------------------------------------------------------------- harness contract

def test_harness_contract_from_text(submission):
    ns = submission
    assert ns["get_init_inputs"]() == [64]

    model = ns["ModelNew"](*ns["get_init_inputs"]())
    assert isinstance(model, nn.Module)
    params = list(inspect.signature(model.forward).parameters.values())
    assert [p.name for p in params] == ["x"], params
    assert params[0].kind in (params[0].POSITIONAL_ONLY, params[0].POSITIONAL_OR_KEYWORD)

    with torch.device("meta"):  # never allocate the real 7.5 GB tensor on the CPU
        inputs = ns["get_inputs"]()
    assert isinstance(inputs, list) and len(inputs) == 1
    (x,) = inputs
    assert isinstance(x, torch.Tensor)
    assert tuple(x.shape) == (112, 64, 512, 512)
    assert x.dtype == torch.float32
    # get_inputs() puts the tensor on CUDA when available, else on the default device.
    allowed = {"meta", "cuda"} if torch.cuda.is_available() else {"meta"}
    assert x.device.type in allowed, x.device
    del x, inputs


def test_source_is_clean(source_text):
    """No print calls, no timing modules, only torch and standard-library imports."""
    assert not re.search(r"\bprint\s*\(", source_text), "instance_norm.py contains print("
    tree = ast.parse(source_text)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"relative import on line {node.lineno}"
            names = [node.module]
        else:
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                assert node.func.id not in ("print", "__import__"), f"line {node.lineno}"
            continue
        for name in names:
            top = name.split(".")[0]
            assert top not in ("time", "timeit"), f"imports {name} (line {node.lineno})"
            assert top == "torch" or top in sys.stdlib_module_names, (
                f"imports {name} (line {node.lineno}): only torch and the standard library"
            )


# --------------------------------------------------------------------------- tools

@pytest.mark.parametrize("script", sorted(f for f in os.listdir(os.path.join(ROOT, "benchmarks")) if f.endswith(".py")))
def test_benchmark_scripts_compile(script):
    """Every script at the top of benchmarks/ compiles, symbol tables included (a `global` after a use of the
    name is a SyntaxError that ast.parse alone does not see: tune.py had one, found only on the device)."""
    path = os.path.join(ROOT, "benchmarks", script)
    with open(path) as f:
        compile(f.read(), path, "exec")


def test_mutation_targets_exist(source_text):
    """benchmarks/mutate.py plants each bug by replacing a text that must occur once in instance_norm.py; a
    kernel edit that rewrites such a line leaves the mutant unbuildable (mutate.py stops) without anyone
    noticing until the tool runs on a GPU: four of its eight targets had gone stale by the twenty-third
    session. This keeps them in step with the source."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("mutate_targets", os.path.join(ROOT, "benchmarks", "mutate.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for name, (what, old, new) in module.MUTANTS.items():
        assert source_text.count(old) == 1, f"{name} ({what}): its text occurs {source_text.count(old)} times"
        assert old != new, name
