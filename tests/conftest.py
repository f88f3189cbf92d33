"""Shared pytest setup for the instance_norm tests.

* `requires_cuda` marker: tests (or whole modules, via `pytestmark`) carrying it are
  skipped when `torch.cuda.is_available()` is False; with INSTANCE_NORM_REQUIRE_GPU=1 (the
  device runs set it) a missing GPU fails the run instead of skipping hundreds of tests.
* A fresh random seed for every test, drawn from os.urandom (override with
  INSTANCE_NORM_TEST_SEED=<int> to reproduce a failure).  The seed is printed in the
  report of every failing test.
* `instance_norm` is imported lazily inside fixtures, so collection never triggers a
  CUDA build.
"""

import math
import os
import random
import sys

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

SOURCE_PATH = os.path.join(ROOT, "instance_norm.py")
SEED_ENV = "INSTANCE_NORM_TEST_SEED"
REQUIRE_GPU_ENV = "INSTANCE_NORM_REQUIRE_GPU"


def pytest_configure(config):
    config.addinivalue_line("markers", "requires_cuda: needs a CUDA GPU (skipped otherwise)")


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    if os.environ.get(REQUIRE_GPU_ENV) == "1":
        raise pytest.UsageError(f"{REQUIRE_GPU_ENV}=1 but torch.cuda.is_available() is False")
    skip = pytest.mark.skip(reason="torch.cuda.is_available() is False")
    for item in items:
        if "requires_cuda" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def seed(request):
    """Fresh seed for every test: seeds torch (CPU and all GPUs) and `random`."""
    env = os.environ.get(SEED_ENV)
    value = int(env) if env else int.from_bytes(os.urandom(8), "little") >> 1
    torch.manual_seed(value)
    random.seed(value)
    request.node.user_properties.append(("seed", value))
    return value


@pytest.fixture
def rng(seed):
    """A Python RNG for shapes and options, derived from the test's seed."""
    return random.Random(seed)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        seeds = [value for key, value in item.user_properties if key == "seed"]
        if seeds:
            report.sections.append(
                ("random seed", f"seed={seeds[0]}  (reproduce with {SEED_ENV}={seeds[0]})")
            )


@pytest.fixture(scope="session")
def inorm():
    """The module under test, imported lazily."""
    import instance_norm

    return instance_norm


@pytest.fixture(scope="session")
def source_text():
    with open(SOURCE_PATH, encoding="utf-8") as f:
        return f.read()


@pytest.fixture
def submission(source_text, tmp_path, monkeypatch):
    """instance_norm.py executed the way the benchmark harness does it: the file text
    exec'd in a fresh dict with __name__ "kernelbench_submission" and no __file__,
    from an empty temporary working directory.  Returns that dict."""
    workdir = tmp_path / "cwd"
    workdir.mkdir()
    monkeypatch.chdir(workdir)
    namespace = {"__name__": "kernelbench_submission"}
    exec(compile(source_text, "kernelbench_submission", "exec"), namespace)
    assert "__file__" not in namespace
    return namespace


# =========================================================================== shared helpers
# References, inputs, layouts, tolerances and plans shared by the test modules.

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64]
LOW_AND_SINGLE = [torch.float32, torch.float16, torch.bfloat16]
LAYOUTS = ["contiguous", "channels_last", "sliced", "transposed", "offset"]

# (relative L2 error, max-abs error as a fraction of max(1, max|ref|)) against float64.
# float16 / bfloat16 are dominated by the rounding of the output.
TOL = {
    torch.float32: (1e-5, 1e-4),
    torch.float16: (2e-3, 4e-3),
    torch.bfloat16: (1.6e-2, 3.2e-2),
    torch.float64: (1e-12, 1e-10),
}
STATS_TOL = {torch.float64: 1e-12}  # everything else accumulates in float32
DEFAULT_STATS_TOL = 1e-5

# Named kernel plans in the field order of instance_norm.Plan (regime, vectors, threads, cluster,
# stages); None is the plan ops.forward picks itself. Stream plans need H*W to be a whole number of
# 16-byte vectors.
REGIMES = {
    "default": None,
    "multi_cta": ("multi_cta", 0, 0, 0, 0),
    "onchip_warp": ("onchip", 4, 32, 1, 0),
    "onchip_cta": ("onchip", 8, 256, 1, 0),
    "cluster": ("cluster", 4, 256, 4, 0),
    "stream": ("stream", 8, 512, 4, 2),
    "flat": ("flat", 0, 0, 0, 0),
}


# =========================================================================== helpers

@pytest.fixture(scope="session")
def ops(inorm):
    ops = inorm.load_extension()
    assert inorm.cuda_kernels_available()
    return ops


def has_clusters(device=None):
    return torch.cuda.get_device_capability(device) >= (9, 0)


def reference(x, weight=None, bias=None, eps=1e-5):
    """Instance norm of x (..., H, W) in float64, two-pass, biased variance."""
    xd = x.double()
    mean = xd.mean(dim=(-2, -1), keepdim=True)
    centered = xd - mean
    var = centered.square().mean(dim=(-2, -1), keepdim=True)
    y = centered * torch.rsqrt(var + eps)
    if weight is not None:
        y = y * weight.double().view(-1, 1, 1)
    if bias is not None:
        y = y + bias.double().view(-1, 1, 1)
    return y


def reference_nd(x, weight=None, bias=None, eps=1e-5):
    """Instance norm of x (N, C, *spatial), any rank >= 3, in float64 over all spatial dims (two-pass,
    biased variance). Differentiable, so float64 autograd through it is the gradients' reference."""
    xd = x.double()
    dims = tuple(range(2, x.dim()))
    per_channel = (-1,) + (1,) * (x.dim() - 2)
    mean = xd.mean(dim=dims, keepdim=True)
    centered = xd - mean
    var = centered.square().mean(dim=dims, keepdim=True)
    y = centered * torch.rsqrt(var + eps)
    if weight is not None:
        y = y * weight.double().view(per_channel)
    if bias is not None:
        y = y + bias.double().view(per_channel)
    return y


def reference_stats(x, eps):
    """Per-instance float64 (mean, rstd), each of shape (N*C,)."""
    xd = x.double().flatten(2)
    mean = xd.mean(dim=-1)
    var = (xd - mean.unsqueeze(-1)).square().mean(dim=-1)
    return mean.flatten(), torch.rsqrt(var + eps).flatten()


def natural_dx(x, w, g_z, eps=1e-5):
    """||rstd * w * dL/dz||, the size of dx's terms: a floor for dx's relative error. On tiny instances
    dx cancels to ~0 (at H*W = 2, to about eps / var of its terms), where two correct roundings differ
    far above TOL relative to dx itself."""
    u = g_z * reference_stats(x, eps)[1].view(x.shape[:2] + (1,) * (x.dim() - 2))
    return (u if w is None else u * w.double().view((-1,) + (1,) * (x.dim() - 2))).norm().item()


def natural_y(x, ref, weight=None, bias=None, eps=1e-5):
    """Per element, the size of what the forward rounds, in float64 and x's shape: |w| * rstd * max|x|
    of the instance (x - mean is found from a mean rounded at |x|'s scale, then multiplied by rstd
    and w) plus |b| and |y|. Times the accumulation's epsilon, it bounds a correct float32
    computation's error (a float32 two-pass on CPU stayed under 0.74x of it on H*W = 2 instances
    with nearly equal values, where rstd nears 1 / sqrt(eps))."""
    per_channel = (-1,) + (1,) * (x.dim() - 2)
    rstd = reference_stats(x, eps)[1].view(x.shape[:2] + (1,) * (x.dim() - 2))
    top = x.double().abs().flatten(2).amax(dim=-1).view(rstd.shape)
    n = rstd * top * (1.0 if weight is None else weight.double().abs().view(per_channel))
    if bias is not None:
        n = n + bias.double().abs().view(per_channel)
    return n + ref.double().abs()


def rel_err(out, ref, scale=None, dtype=None):
    """||out - ref|| / ||scale|| (scale defaults to ref) in float64 (NaN propagates, so a NaN fails any
    `<=`). With `dtype`, the denominator is at least that dtype's smallest normal number: a reference
    whose whole norm is below it (a gelu gradient of 1e-140) rounds to zero or a subnormal in `dtype`,
    where relative error means nothing, so the error is then measured against that floor."""
    out, ref = out.double(), ref.double()
    num = (out - ref).norm().item()
    den = (ref if scale is None else scale.double()).norm().item()
    if dtype is not None:
        den = max(den, torch.finfo(dtype).tiny)
    return num / den if den > 0 else num


def assert_close_to(out, ref, dtype, what="", eager=None, natural=None):
    """out is within TOL[dtype] of the float64 ref, in relative L2 and in max-abs. `eager`, if given,
    returns PyTorch's output of the same computation in `dtype`: where out misses TOL, it passes at up
    to twice eager's own error. That happens on ill-conditioned H*W = 2 instances (two nearly equal
    values, rstd near 1/sqrt(eps)): the float32 mean's rounding, times rstd, is above TOL for PyTorch
    as for us (one element of a (3, 679, 2, 1) float32 output 1.6e-4 off against 1e-4). Twice eager's
    error is a sample, not a bound (a (5, 566, 2, 1) float32 flat output was 1.93e-3 off against
    1.72e-3): `natural`, if given, returns natural_y's sizes of what each element's computation
    rounds (called only where out misses the max-abs bound), and each element may then be off by 8
    accumulation epsilons of its size."""
    assert out.shape == ref.shape, f"{what}: shape {tuple(out.shape)} != {tuple(ref.shape)}"
    if ref.numel() == 0:
        return
    rel_tol, abs_tol = TOL[dtype]
    err = rel_err(out, ref, dtype=dtype)
    max_abs = max_abs_err(out, ref)
    bound = abs_tol * max(1.0, ref.double().abs().max().item())
    if eager is not None and (err > rel_tol or max_abs > bound):
        theirs = eager()
        rel_tol = max(rel_tol, 2 * rel_err(theirs, ref, dtype=dtype))
        bound = max(bound, 2 * max_abs_err(theirs, ref))
        what = f"{what} (bounds widened to twice eager's error)"
    unit = torch.finfo(torch.float64 if dtype == torch.float64 else torch.float32).eps
    sizes = natural().double() if natural is not None and (err > rel_tol or max_abs > bound) else None
    if sizes is not None and err > rel_tol:
        # The same 8 epsilons of what each element rounds, as a norm: an ill-conditioned H*W = 2
        # instance can miss the relative bound alone (a (2, 5, 2) float32 output 2.8e-5 off against 1e-5).
        rel_tol = max(rel_tol, 8 * unit * sizes.norm().item() / max(ref.double().norm().item(), torch.finfo(dtype).tiny))
        what = f"{what} (relative bound from what it rounds)"
    assert err <= rel_tol, f"{what}: relative error {err:.3g} > {rel_tol:.3g} (max abs {max_abs:.3g})"
    if sizes is not None and max_abs > bound:
        allowed = torch.clamp(8 * unit * sizes, min=bound)
        excess = ((out.double() - ref.double()).abs() - allowed).max().item()
        assert excess <= 0, (f"{what}: max abs error {max_abs:.3g} > {bound:.3g} and past 8 epsilons of what "
                             f"it rounds by {excess:.3g} (relative {err:.3g})")
        return
    assert max_abs <= bound, f"{what}: max abs error {max_abs:.3g} > {bound:.3g} (relative {err:.3g})"


def max_abs_err(out, ref):
    return (out.double() - ref.double()).abs().max().item() if ref.numel() else 0.0


def assert_matches_eager(out, expected, ref, dtype, what="", name="x", terms=None):
    """out agrees with eager's `expected` within twice our tolerance plus eager's own
    error against the float64 `ref` (eager is not always as accurate as TOL asks; the
    tight check of `out` is the one against `ref`). For a gradient of weight or bias (`name`) our
    own allowance is PARAM_TOL, as in check_grads: those are sums over the batch and the plane that
    cancel (a float32 dweight of 0.21 from terms near 1 was 2.2e-5 off on each side of float64), and
    with `terms` (param_terms) both errors are relative to the terms' sizes as well."""
    assert out.shape == expected.shape and out.dtype == expected.dtype, f"{what}: differs from eager"
    if ref.numel() == 0:
        return
    rel_tol, abs_tol = TOL[dtype]
    own = PARAM_TOL[dtype] if name in ("weight", "bias") else 2 * rel_tol
    # Both differences are relative to ||ref||, so the bound is the triangle inequality's: relative to
    # eager's own ||expected||, a gradient eager got 17 % low (bf16 dbias 0.352 for 0.4245; ours 0.4238)
    # looked 0.206 away against a bound of 0.204.
    scale = param_scale(ref, terms, name)
    rel_bound = own + rel_err(expected, ref, scale=scale, dtype=dtype)
    abs_bound = 2 * abs_tol * max(1.0, ref.double().abs().max().item()) + max_abs_err(expected, ref)
    err, max_abs = rel_err(out, expected, scale=scale, dtype=dtype), max_abs_err(out, expected)
    assert err <= rel_bound, f"{what} vs eager: relative difference {err:.3g} > {rel_bound:.3g}"
    assert max_abs <= abs_bound, f"{what} vs eager: max abs difference {max_abs:.3g} > {abs_bound:.3g}"


def assert_stats_close(stats, x, eps, what=""):
    """stats == (mean, rstd) per instance, in the accumulation dtype."""
    n, c = x.shape[:2]
    acc = torch.float64 if x.dtype == torch.float64 else torch.float32
    assert stats.dtype == acc, f"{what}: stats dtype {stats.dtype}"
    assert tuple(stats.shape) == (2, n * c), f"{what}: stats shape {tuple(stats.shape)}"
    tol = STATS_TOL.get(x.dtype, DEFAULT_STATS_TOL)
    mean_ref, rstd_ref = reference_stats(x, eps)
    mean_err = ((stats[0].double() - mean_ref).abs() / (mean_ref.abs() + 1 / rstd_ref)).max().item()
    rstd_err = ((stats[1].double() - rstd_ref).abs() / rstd_ref).max().item()
    assert mean_err <= tol, f"{what}: mean error {mean_err:.3g} > {tol:.3g}"
    assert rstd_err <= tol, f"{what}: rstd error {rstd_err:.3g} > {tol:.3g}"


def make_input(shape, dtype, rng, log_scale=(-2.0, 2.0), device="cuda"):
    """Random data with a random global scale and per-instance offsets and scales
    (offset / scale within +-5, so the problem stays well conditioned in every dtype)."""
    n, c = shape[0], shape[1]
    per_instance = (n, c) + (1,) * (len(shape) - 2)  # any rank >= 3; the same draws as before for 4-D
    scale = 10 ** rng.uniform(*log_scale)
    inst_scale = scale * 10 ** (torch.rand(per_instance, device=device) - 0.5)
    inst_offset = inst_scale * (torch.rand(per_instance, device=device) * 10 - 5)
    if rng.random() < 0.7:
        base = torch.randn(shape, device=device)
    else:
        base = torch.rand(shape, device=device) * 3.4  # about unit variance
    return (base * inst_scale + inst_offset).to(dtype)


def with_layout(v, layout):
    """A tensor equal to v (N, C, H, W) with the given memory layout.  Memory outside
    the view is NaN, so a kernel reading out of bounds shows up in its result."""
    n, c, h, w = v.shape
    nan = float("nan")
    if layout == "contiguous":
        return v.clone()
    if layout == "channels_last":
        return v.contiguous(memory_format=torch.channels_last)
    if layout == "sliced":
        big = torch.full((n, c, h + 1, w + 2), nan, dtype=v.dtype, device=v.device)
        x = big[:, :, 1:, 2:]
    elif layout == "transposed":
        x = torch.full((n, c, w, h), nan, dtype=v.dtype, device=v.device).transpose(2, 3)
    elif layout == "offset":
        flat = torch.full((v.numel() + 1,), nan, dtype=v.dtype, device=v.device)
        x = flat[1:].view(v.shape)
    else:
        raise ValueError(layout)
    x.copy_(v)
    return x


def random_affine(c, dtype, rng, device="cuda"):
    if rng.random() < 0.5:
        return None, None
    weight = (torch.randn(c, device=device) * 2).to(dtype)
    bias = torch.randn(c, device=device).to(dtype)
    return weight, bias


def poison_allocator(nbytes, device="cuda"):
    """Leave a freed block of nbytes filled with 0xFF (NaN in every float dtype) in the
    caching allocator, so that the next output of that size most likely reuses it and
    any element a kernel forgets to write reads as NaN."""
    junk = torch.full((max(int(nbytes), 1),), 0xFF, dtype=torch.uint8, device=device)
    del junk


def split_hw(hw, rng):
    """A random (H, W) with H * W == hw."""
    divisors = [d for d in range(1, math.isqrt(hw) + 1) if hw % d == 0]
    d = rng.choice(divisors)
    return (d, hw // d) if rng.random() < 0.5 else (hw // d, d)


def as_plan(plan):
    import instance_norm

    return plan if isinstance(plan, instance_norm.Plan) else instance_norm.Plan(*plan)


def plan_capacity(plan, dtype, backward=False):
    """The largest H*W the plan holds at every size up to it (the host's own rule, asked through
    instance_norm.plan_capacity); 0 when the device cannot run the plan, -1 without limit."""
    import instance_norm

    probe = torch.empty(1, 1, 1, 1, dtype=dtype, device="cuda")
    return instance_norm.plan_capacity(probe, as_plan(plan), backward)


def whole_vectors(plan):
    return as_plan(plan).regime == "stream"


def filling_hw(plan, dtype, rng):
    """An H*W filling the plan 50%..100%: odd where the plan allows, whole vectors for stream plans."""
    top = plan_capacity(plan, dtype)
    hw = rng.randint(top // 2 + 1, top)
    if whole_vectors(plan):
        vec = 16 // dtype.itemsize
        return max(vec, hw // vec * vec)
    return hw if hw % 2 else hw - 1


def regime_hw(name, dtype, rng):
    plan = REGIMES[name]
    if plan is None or as_plan(plan).regime == "multi_cta":
        return rng.randint(300, 70000)
    if as_plan(plan).regime == "flat":  # tiny instances, many to a CTA, as well as the largest ones
        return rng.choice([rng.randint(2, 80), rng.randint(81, 1100), filling_hw(plan, dtype, rng)])  # eager: not 1x1
    return filling_hw(plan, dtype, rng)


def skip_unsupported_regime(name, dtype):
    plan = REGIMES[name]
    if plan is None:
        return
    regime = as_plan(plan).regime
    if dtype == torch.float64 and regime != "multi_cta":
        pytest.skip("float64 runs only the multi_cta plan")
    if regime in ("cluster", "stream") and not has_clusters():
        pytest.skip("thread block clusters need sm_90+")


# =========================================================================== memory layouts (issue 11)
# The channel-last kernels serve "channels-last dense" input; the output keeps that layout. Everything
# else (and every forced NCHW plan) goes through NCHW and returns a contiguous output.

CL_REGIMES = ("cl_onchip", "cl_split")


def channels_last_strides(shape):
    """Strides of a dense (N, C, *spatial) tensor with C innermost: (C*M, 1, ..., C)."""
    strides = [0] * len(shape)
    strides[1] = 1
    step = shape[1]
    for d in reversed(range(2, len(shape))):
        strides[d] = step
        step *= shape[d]
    strides[0] = step
    return tuple(strides)


def is_channels_last_dense(x):
    """x (N, C, *spatial) with C > 1, M = prod(spatial) > 1 and channels-last strides, dims of size 1
    ignored: for 4-D, channels_last and not contiguous; 5-D channels_last_3d; 3-D x.transpose(1, 2)
    contiguous. (With C == 1 or M == 1 such strides are also contiguous, so the rule excludes them.)"""
    if x.dim() < 3 or x.size(1) <= 1 or math.prod(x.shape[2:]) <= 1:
        return False
    want = channels_last_strides(tuple(x.shape))
    return all(size == 1 or got == expected for size, got, expected in zip(x.shape, x.stride(), want))


def keeps_layout(x):
    """Whether the ops' own plan choice keeps x's channels-last layout: x is 4-D or 5-D, channels-last
    dense, and C fills whole 16-byte vectors (other channels-last input, e.g. C = 3 or (N, L, C) memory
    for 1-D, runs the NCHW kernels on an NCHW copy and gets NCHW output, unless a channels-last plan is
    forced)."""
    return x.dim() in (4, 5) and is_channels_last_dense(x) and (x.shape[1] * x.element_size()) % 16 == 0


def expect_layout(out, x, plan=None, what=""):
    """out has the layout the ops promise for input x on `plan` (None: the op's own choice, as in the
    modules): x's channels-last strides when a forced channels-last plan serves x, or with no forced plan
    when keeps_layout(x); NCHW-contiguous otherwise."""
    assert tuple(out.shape) == tuple(x.shape), f"{what}: shape {tuple(out.shape)} != {tuple(x.shape)}"
    kept = keeps_layout(x) if plan is None else (as_plan(plan).regime in CL_REGIMES and is_channels_last_dense(x))
    if kept:
        same = all(size == 1 or a == b for size, a, b in zip(x.shape, out.stride(), x.stride()))
        assert same, f"{what}: output strides {out.stride()}, expected the input's channels-last {x.stride()}"
    else:
        assert out.is_contiguous(), f"{what}: output is not contiguous (strides {out.stride()}, input {x.stride()})"


def run_ops(ops, x, weight, bias, eps, plan):
    if plan is None:
        return ops.forward(x, weight, bias, eps)
    return ops.forward_with_plan(x, weight, bias, eps, as_plan(plan).fields())




# Inputs nn.InstanceNorm2d rejects, by name: (channels, device) -> tensor. The dtype errors raise
# NotImplementedError subclasses in some PyTorch versions, so those compare by isinstance.
BAD_INPUTS = {
    "2d": lambda c, device: torch.randn(c, 5, device=device),
    "5d": lambda c, device: torch.randn(2, c, 3, 3, 3, device=device),
    "1x1": lambda c, device: torch.randn(2, c, 1, 1, device=device),
    "1x1_unbatched": lambda c, device: torch.randn(c, 1, 1, device=device),
    "int64": lambda c, device: torch.randint(-5, 5, (2, c, 3, 3), device=device),
    "bool": lambda c, device: torch.randint(0, 2, (2, c, 3, 3), device=device).bool(),
    "wrong_c_affine": lambda c, device: torch.randn(2, c + 1, 4, 4, device=device),
}
DTYPE_ERRORS = {"int64", "bool"}
# wrong C without affine only warns
BAD_CASES = [(name, affine) for name in sorted(BAD_INPUTS) for affine in (False, True)
             if affine or name != "wrong_c_affine"]
BAD_CASE_IDS = [f"{n}-{'affine' if a else 'plain'}" for n, a in BAD_CASES]


# float64 activations, differentiable, shared by test_epilogue.py and test_layouts.py; relu / leaky_relu
# through F for PyTorch's convention at 0. gelu_tanh is written as z * sigmoid(2u), which equals PyTorch's
# 0.5 z (1 + tanh(u)) but does not cancel for very negative z (there 1 + tanh(u) loses every digit in
# float64 too, and the kernels, which use the sigmoid form, were measured against a reference that was
# wrong: an eval test with every z below -5 failed at relative error 3e-11 where the kernel was right).
ACT_REF = {
    "identity": lambda z, s: z,
    "relu": lambda z, s: torch.nn.functional.relu(z),
    "leaky_relu": lambda z, s: torch.nn.functional.leaky_relu(z, s),
    "silu": lambda z, s: z * torch.sigmoid(z),
    "gelu": lambda z, s: 0.5 * z * (1 + torch.erf(z / math.sqrt(2))),
    "gelu_tanh": lambda z, s: z * torch.sigmoid(2 * math.sqrt(2 / math.pi) * (z + 0.044715 * z**3)),
}


def capture_no_grad(model, x):
    """A CUDA graph of model(x) without grad, warmed up on a side stream first (as the CUDA graphs docs
    ask) -> (graph, the static output)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), torch.no_grad():
        model(x)  # warm up outside the capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph), torch.no_grad():
        y = model(x)
    return graph, y


def near_kink(z):
    """Where relu's / leaky_relu's choice at z = 0 is not fixed by the input: z within rounding of 0 but
    not 0, and z exactly 0 inside an instance whose z varies (an element equal to the instance's mean by
    chance, e.g. bf16 input with repeated values; the kernels' float32 mean lands an ulp to either
    side: a dx 25 off in a bf16 test). Exact zeros of instances whose z is constant (constant input, or
    weight 0) stay, since the kernels compute exactly 0 there too and PyTorch's convention at 0 is tested."""
    z = z.detach()
    near = (z.abs() < 1e-4 * max(1.0, z.abs().max().item())) & (z != 0)
    flat = z.flatten(2)
    varies = (flat.amax(-1) != flat.amin(-1)).view(z.shape[:2] + (1,) * (z.dim() - 2))
    return near | ((z == 0) & varies)


# Gradients against a float64 reference (test_epilogue.py, test_layouts.py): the affine gradients by
# relative L2 error, dx within TOL, measured against the size of its terms when they cancel.
PARAM_TOL = {torch.float32: 1e-4, torch.float16: 4e-3, torch.bfloat16: 3.2e-2, torch.float64: 1e-10}


def param_terms(dz, xhat):
    """Per channel, the L2 norms of the float64 terms that dweight (dz * xhat) and dbias (dz) sum over
    the batch and the plane; dz is the gradient at the affine output (before any activation), xhat
    the normalized input. A float32 sum rounds relative to its terms, not to its result, and a sum of
    terms near 1 can cancel to almost nothing: a gelu module's dbias of -2.36e-4 from 1368 terms,
    (1, 1, 38, 36), came out 1.07e-3 off relative to itself (CI's CPU run, seed 7271328310780391739),
    PyTorch's 1.62e-3. Relative to the terms' norm (about 18 there) the same error is 1.4e-8, while
    one dropped term would still be 1/sqrt(H*W) of it."""
    dims = [0] + list(range(2, dz.dim()))
    return {"weight": (dz * xhat).square().sum(dims).sqrt(), "bias": dz.square().sum(dims).sqrt()}


def param_scale(want, terms, name):
    """The denominator of a weight / bias gradient's relative error: the gradient itself, or per
    channel the larger of it and its terms' norm when `terms` (param_terms) is given."""
    if terms is None or name not in terms:
        return want
    return torch.maximum(want.double().abs(), terms[name].to(want.device, torch.float64))


def check_grads(got, ref, names, dtype, what, natural=0.0, eager=None, terms=None):
    """`eager`, if given, returns PyTorch's own gradients of the same computation in `dtype`: where dx
    misses TOL relative to its terms, it passes at up to twice eager's error. That happens on
    ill-conditioned tiny instances (H*W = 2 with two nearly equal values, so rstd ~ 1/sqrt(eps)):
    the rounding of x itself, times rstd, is then above TOL, for PyTorch as for us. The other gradients
    (dx measured against itself, the residual's) widen the same way, through assert_close_to. `terms`
    (param_terms), if given, puts the weight and bias gradients' errors relative to their terms too."""
    for name, g, want in zip(names, got, ref):
        assert g is not None and g.shape == want.shape and g.dtype == dtype, f"{what}: grad of {name}"
        assert torch.isfinite(g).all(), f"{what}: non-finite grad of {name}"
        if name in ("weight", "bias"):
            err = rel_err(g, want, scale=param_scale(want, terms, name), dtype=dtype)
            assert err <= PARAM_TOL[dtype], f"{what}: grad of {name}: relative error {err:.3g}"
        elif name == "x" and natural > want.norm().item():
            # Both bounds widen to twice eager's own error when ours misses them: a (3, 2, 2, 1) float32
            # dx was 1.17e-4 off in max-abs against 1e-4, within its relative bound thanks to eager's.
            err = (g.double() - want).norm().item() / natural
            bound = TOL[dtype][1] * max(1.0, want.abs().max().item())
            theirs = theirs_abs = 0.0
            if eager and (err > TOL[dtype][0] or max_abs_err(g, want) > bound):
                eager_dx = eager()[0].double()
                theirs = (eager_dx - want).norm().item() / natural
                theirs_abs = max_abs_err(eager_dx, want)
            assert err <= max(TOL[dtype][0], 2 * theirs), \
                f"{what}: grad of x: error {err:.3g} relative to its terms (eager's: {theirs:.3g})"
            assert max_abs_err(g, want) <= max(bound, 2 * theirs_abs), \
                f"{what}: grad of x: max abs error {max_abs_err(g, want):.3g} (eager's: {theirs_abs:.3g})"
        else:  # widened to twice eager's own error where eager is given and ours misses TOL
            theirs = (lambda i=names.index(name): eager()[i]) if eager else None
            assert_close_to(g, want, dtype, f"{what}: grad of {name}", eager=theirs)
