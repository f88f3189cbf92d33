"""GPU tests of instance_norm (all need CUDA).

Every result is compared with a float64 reference computed by hand (`reference`) and,
where eager supports the input, with nn.InstanceNorm2d / F.instance_norm on the same
device.  Inputs are fresh random tensors for every run (see the seed in conftest.py).

Module tests run under torch.no_grad(): it is the inference path the benchmark measures,
and ModelNew may defer to eager PyTorch when autograd needs a graph (affine parameters
require grad by default).  Gradients are checked once here (test_autograd_matches_eager);
training is covered in depth by test_training.py.
"""

import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

pytestmark = pytest.mark.requires_cuda

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

# Named kernel plans (vectors_per_thread, threads_per_instance, cluster_size[, stages]); None is
# the plan ops.forward picks itself. A plan with stages runs the stream kernel, which needs H*W to
# be a whole number of 16-byte vectors.
REGIMES = {
    "default": None,
    "multi_cta": (4, 256, 0),
    "onchip_warp": (4, 32, 1),
    "onchip_cta": (8, 256, 1),
    "cluster": (4, 256, 4),
    "stream": (8, 512, 4, 2),
}


# =========================================================================== helpers

@pytest.fixture(scope="module")
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


def reference_stats(x, eps):
    """Per-instance float64 (mean, rstd), each of shape (N*C,)."""
    xd = x.double().flatten(2)
    mean = xd.mean(dim=-1)
    var = (xd - mean.unsqueeze(-1)).square().mean(dim=-1)
    return mean.flatten(), torch.rsqrt(var + eps).flatten()


def rel_err(out, ref):
    """||out - ref|| / ||ref|| in float64 (NaN propagates, so a NaN fails any `<=`)."""
    out, ref = out.double(), ref.double()
    num = (out - ref).norm().item()
    den = ref.norm().item()
    return num / den if den > 0 else num


def assert_close_to(out, ref, dtype, what=""):
    """out is within TOL[dtype] of the float64 ref, in relative L2 and in max-abs."""
    assert out.shape == ref.shape, f"{what}: shape {tuple(out.shape)} != {tuple(ref.shape)}"
    if ref.numel() == 0:
        return
    rel_tol, abs_tol = TOL[dtype]
    err = rel_err(out, ref)
    max_abs = max_abs_err(out, ref)
    bound = abs_tol * max(1.0, ref.double().abs().max().item())
    assert err <= rel_tol, f"{what}: relative error {err:.3g} > {rel_tol:.3g} (max abs {max_abs:.3g})"
    assert max_abs <= bound, f"{what}: max abs error {max_abs:.3g} > {bound:.3g} (relative {err:.3g})"


def max_abs_err(out, ref):
    return (out.double() - ref.double()).abs().max().item() if ref.numel() else 0.0


def assert_matches_eager(out, expected, ref, dtype, what=""):
    """out agrees with eager's `expected` within twice our tolerance plus eager's own
    error against the float64 `ref` (eager is not always as accurate as TOL asks; the
    tight check of `out` is the one against `ref`)."""
    assert out.shape == expected.shape and out.dtype == expected.dtype, f"{what}: differs from eager"
    if ref.numel() == 0:
        return
    rel_tol, abs_tol = TOL[dtype]
    rel_bound = 2 * rel_tol + rel_err(expected, ref)
    abs_bound = 2 * abs_tol * max(1.0, ref.double().abs().max().item()) + max_abs_err(expected, ref)
    err, max_abs = rel_err(out, expected), max_abs_err(out, expected)
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
    scale = 10 ** rng.uniform(*log_scale)
    inst_scale = scale * 10 ** (torch.rand(n, c, 1, 1, device=device) - 0.5)
    inst_offset = inst_scale * (torch.rand(n, c, 1, 1, device=device) * 10 - 5)
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


def capacity_bytes(plan):
    k, g, cs = plan[:3]
    return k * g * cs * 16


def max_fitting_hw(plan, dtype):
    """Largest H*W the spec guarantees to fit: capacity >= instance bytes + 16."""
    return (capacity_bytes(plan) - 16) // dtype.itemsize


def filling_hw(plan, dtype, rng):
    """An odd H*W (so not a multiple of the vector width) filling 50%..100% of the plan."""
    top = max_fitting_hw(plan, dtype)
    hw = rng.randint(top // 2 + 1, top)
    return hw if hw % 2 else hw - 1


def regime_hw(name, dtype, rng):
    plan = REGIMES[name]
    if plan is None or plan[2] == 0:
        return rng.randint(300, 70000)
    if len(plan) == 4:  # stream: whole vectors
        return filling_hw(plan, dtype, rng) // 8 * 8
    return filling_hw(plan, dtype, rng)


def skip_unsupported_regime(name, dtype):
    plan = REGIMES[name]
    if dtype == torch.float64 and plan is not None and plan[2] != 0:
        pytest.skip("float64 runs only the multi_cta plan")
    if plan is not None and plan[2] > 1 and not has_clusters():
        pytest.skip("thread block clusters need sm_90+")


def run_ops(ops, x, weight, bias, eps, plan):
    if plan is None:
        return ops.forward(x, weight, bias, eps)
    return ops.forward_with_plan(x, weight, bias, eps, *plan)


def check_output_basics(out, x, what):
    assert out.shape == x.shape and out.dtype == x.dtype and out.device == x.device, what
    assert out.is_contiguous(), f"{what}: output is not NCHW-contiguous"
    if out.numel():
        assert out.data_ptr() != x.data_ptr(), f"{what}: output aliases the input"


def check_module_case(inorm, v, layout, affine, eps, training, what):
    """ModelNew on `v` in `layout` against the float64 reference and nn.InstanceNorm2d."""
    dtype, c = v.dtype, v.shape[1]
    ours = inorm.ModelNew(c, eps=eps, affine=affine, device="cuda", dtype=dtype)
    eager = nn.InstanceNorm2d(c, eps=eps, affine=affine, device="cuda", dtype=dtype)
    with torch.no_grad():
        if affine:
            ours.weight.copy_(torch.randn(c) * 2)
            ours.bias.copy_(torch.randn(c))
        eager.load_state_dict(ours.state_dict())
        ours.train(training)
        eager.train(training)
        x = with_layout(v, layout)
        poison_allocator(v.numel() * v.element_size())
        out = ours(x)
        check_output_basics(out, x, what)
        assert torch.equal(x, v), f"{what}: the input was modified"
        assert torch.isfinite(out).all(), f"{what}: non-finite output for finite input"
        ref = reference(v, ours.weight, ours.bias, eps)  # weight/bias are None without affine
        assert_close_to(out, ref, dtype, f"{what} vs float64")
        assert_matches_eager(out, eager(x), ref, dtype, what)


# =========================================================================== module: random sweep and shapes

@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_random_sweep(inorm, rng, dtype):
    for case in range(40):
        n, c = rng.randint(1, 8), rng.randint(1, 70)
        h, w = 1, 1
        while h * w == 1:
            h, w = rng.randint(1, 300), rng.randint(1, 300)
        layout = rng.choice(LAYOUTS)
        affine = rng.random() < 0.5
        eps = rng.choice([1e-5, 1e-3, 1e-6])
        training = rng.random() < 0.8
        what = f"case {case}: shape={(n, c, h, w)} {dtype} {layout} affine={affine} eps={eps} train={training}"
        v = make_input((n, c, h, w), dtype, rng)
        check_module_case(inorm, v, layout, affine, eps, training, what)


EDGE_HW = [(1, 2), (2, 1), (3, 1), (1, 5), (7, 1), (7, 7), (127, 129), (1, 31), (3, 11),
           (17, 241), (1, 65537), (65537, 1)]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("hw", EDGE_HW, ids=lambda hw: f"{hw[0]}x{hw[1]}")
def test_edge_spatial_sizes(inorm, rng, dtype, hw):
    n, c = rng.randint(1, 3), rng.randint(1, 5)
    layout = rng.choice(LAYOUTS)
    affine = rng.random() < 0.5
    v = make_input((n, c) + hw, dtype, rng)
    check_module_case(inorm, v, layout, affine, 1e-5, True, f"shape={(n, c) + hw} {layout} affine={affine}")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(70000, 1, 2, 3), (1, 70000, 3, 1), (40000, 3, 1, 5)], ids=str)
def test_many_tiny_instances(inorm, rng, dtype, shape):
    """N*C beyond 65535 (grid y/z limits)."""
    v = make_input(shape, dtype, rng)
    check_module_case(inorm, v, "contiguous", rng.random() < 0.5, 1e-5, True, f"shape={shape}")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape,layout", [((1, 1, 5000, 5000), "contiguous"),
                                          ((2, 3, 1500, 2500), "contiguous"),
                                          ((2, 3, 1000, 1100), "channels_last")], ids=str)
def test_large_instances(inorm, rng, dtype, shape, layout):
    v = make_input(shape, dtype, rng)
    check_module_case(inorm, v, layout, True, 1e-5, True, f"shape={shape} {layout}")
    del v
    torch.cuda.empty_cache()


@pytest.mark.parametrize("shape", [(0, 4, 5, 5), (0, 4, 1, 1), (0, 4, 0, 0), (2, 4, 0, 5), (2, 4, 5, 0)], ids=str)
@pytest.mark.parametrize("affine", [False, True], ids=["plain", "affine"])
def test_empty_inputs_like_eager(inorm, shape, affine):
    ours = inorm.ModelNew(4, affine=affine, device="cuda")
    eager = nn.InstanceNorm2d(4, affine=affine, device="cuda")
    x = torch.randn(shape, device="cuda")
    with torch.no_grad():
        try:
            expected = eager(x)
        except Exception as exc:  # noqa: BLE001
            with pytest.raises(type(exc)):
                ours(x)
            return
        out = ours(x)
    assert out.shape == expected.shape and out.dtype == expected.dtype and out.device == expected.device


# =========================================================================== ops: every kernel regime

def check_plan(ops, v, weight, bias, eps, plan, what):
    poison_allocator(v.numel() * v.element_size())
    y, stats = run_ops(ops, v, weight, bias, eps, plan)
    check_output_basics(y, v, what)
    assert torch.isfinite(y).all(), f"{what}: non-finite output for finite input"
    assert_close_to(y, reference(v, weight, bias, eps), v.dtype, what)
    assert_stats_close(stats, v, eps, what)


def plan_input(dtype, hw, rng, max_instances=6):
    n = rng.randint(1, 3)
    c = rng.randint(1, max(1, max_instances // n))
    v = make_input((n, c) + split_hw(hw, rng), dtype, rng)
    return with_layout(v, rng.choice(LAYOUTS)), c


def check_plan_sizes(ops, rng, dtype, plan, max_instances=6):
    """A plan on inputs filling it 50..100% (an odd size, and the largest size the spec
    guarantees: capacity >= bytes + 16), then on an instance whose bytes exceed the
    capacity, which must raise RuntimeError.  Sizes in between are not asserted: the
    implementation may accept them when the instance happens to be vector-aligned."""
    top = max_fitting_hw(plan, dtype)
    for hw in (filling_hw(plan, dtype, rng), top):
        x, c = plan_input(dtype, hw, rng, max_instances)
        weight, bias = random_affine(c, dtype, rng)
        check_plan(ops, x, weight, bias, 1e-5, plan, f"plan={plan} {dtype} shape={tuple(x.shape)}")
    too_big = capacity_bytes(plan) // dtype.itemsize + 1
    x, _ = plan_input(dtype, too_big, rng, 2)
    with pytest.raises(RuntimeError):
        run_ops(ops, x, None, None, 1e-5, plan)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_plan_multi_cta(ops, rng, dtype):
    sizes = [2, 33, 1000, 4097, 65537, 90300, 1031 * 1021]
    for plan in [(2, 128, 0), (4, 256, 0), (8, 512, 0), (4, 1024, 0)]:
        for hw in sizes:
            x, c = plan_input(dtype, hw, rng, 4 if hw > 100000 else 8)
            weight, bias = random_affine(c, dtype, rng)
            check_plan(ops, x, weight, bias, 1e-5, plan, f"plan={plan} {dtype} shape={tuple(x.shape)}")


def refused_by_device(ops, plan, dtype):
    """The spec lets a plan raise RuntimeError when the device cannot run it (e.g. 16 CTAs
    of 1024 threads, or too many registers per CTA).  Such a refusal cannot depend on the
    instance size, so probe the plan with a tiny instance."""
    x = torch.randn(1, 1, 1, 8, dtype=dtype, device="cuda")
    try:
        run_ops(ops, x, None, None, 1e-5, plan)
    except RuntimeError:
        return True
    return False


@pytest.mark.parametrize("dtype", LOW_AND_SINGLE, ids=str)
@pytest.mark.parametrize("threads", [32, 64, 128, 256, 512, 1024])
def test_plan_onchip(ops, rng, dtype, threads):
    for k in (2, 4, 8):
        plan = (k, threads, 1)
        if refused_by_device(ops, plan, dtype):
            assert k != 2, f"plan {plan} was refused"
            continue
        # several instances per CTA below 128 threads: use enough of them to leave a partial CTA
        check_plan_sizes(ops, rng, dtype, plan, max_instances=13 if threads < 128 else 6)


@pytest.mark.parametrize("dtype", LOW_AND_SINGLE, ids=str)
@pytest.mark.parametrize("cluster", [2, 4, 8, 16])
def test_plan_cluster(ops, rng, dtype, cluster):
    if not has_clusters():
        pytest.skip("thread block clusters need sm_90+")
    refused = []
    for threads in (128, 256, 512, 1024):
        for k in (2, 4, 8):
            plan = (k, threads, cluster)
            if refused_by_device(ops, plan, dtype):
                refused.append(plan)
                continue
            check_plan_sizes(ops, rng, dtype, plan, max_instances=4)
    assert (2, 128, cluster) not in refused, f"even the smallest plan was refused; refused: {refused}"


def stream_fits(slice_vectors, stages, tensors=1):
    """Whether a stream plan's stages fit in a CTA's shared memory (the kernel keeps 4 KB spare)."""
    optin = getattr(torch.cuda.get_device_properties(0), "shared_memory_per_block_optin", 227 * 1024)
    return stages * tensors * slice_vectors * 16 + 4096 <= optin


@pytest.mark.parametrize("dtype", LOW_AND_SINGLE, ids=str)
@pytest.mark.parametrize("cluster", [1, 2, 4, 8, 16])
def test_plan_stream(ops, rng, dtype, cluster):
    """The stream kernel at every cluster size and pipeline depth: instances filling a CTA's
    slice partly, wholly and barely, and more instances than resident clusters so that every
    cluster goes round its ring of stages several times. Stages that do not fit in shared
    memory must raise RuntimeError, as must instances too big or not whole vectors."""
    if not has_clusters():
        pytest.skip("the stream kernel needs sm_90+")
    vec = 16 // dtype.itemsize
    capacity = 8 * 512 * cluster  # vectors
    for stages in (1, 2, 3, 4):
        plan = (8, 512, cluster, stages)
        for vectors in (rng.randint(capacity // 2 + 1, capacity), capacity, rng.randint(1, 64)):
            hw = vectors * vec
            most = max(2, min(600, (48 << 20) // (hw * dtype.itemsize)))
            n = rng.randint(1, 3)
            c = rng.randint(max(1, most // (2 * n)), max(1, most // n))
            x = with_layout(make_input((n, c) + split_hw(hw, rng), dtype, rng), rng.choice(LAYOUTS))
            what = f"plan={plan} {dtype} shape={tuple(x.shape)}"
            if stages == 1 or not stream_fits(-(-vectors // cluster), stages):  # the forward needs 2
                with pytest.raises(RuntimeError):
                    run_ops(ops, x, None, None, 1e-5, plan)
                continue
            weight, bias = random_affine(c, dtype, rng)
            check_plan(ops, x, weight, bias, 1e-5, plan, what)
        for hw in ((capacity + 1) * vec, capacity * vec - 1):  # too big; not whole vectors
            x = make_input((1, 2) + split_hw(hw, rng), dtype, rng)
            with pytest.raises(RuntimeError):
                run_ops(ops, x, None, None, 1e-5, plan)


def test_plan_float64_only_multi_cta(ops, rng):
    x = make_input((2, 3, 5, 7), torch.float64, rng)
    for plan in [(2, 32, 1), (8, 256, 1), (2, 128, 2), (8, 512, 2, 1)]:
        with pytest.raises(RuntimeError):
            run_ops(ops, x, None, None, 1e-5, plan)


def test_plan_cluster_refused_before_sm90(ops, rng):
    if has_clusters():
        pytest.skip("this GPU has thread block clusters")
    x = make_input((2, 3, 5, 7), torch.float32, rng)
    with pytest.raises(RuntimeError):
        run_ops(ops, x, None, None, 1e-5, (2, 128, 2))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_ops_forward_stats(ops, rng, dtype):
    """The default plan's output and statistics for shapes of every size class."""
    for shape in [(3, 5, 7, 9), (70000, 1, 2, 3), (4, 8, 64, 65), (2, 4, 512, 512), (1, 2, 2000, 1999)]:
        v = make_input(shape, dtype, rng)
        weight, bias = random_affine(shape[1], dtype, rng)
        check_plan(ops, with_layout(v, rng.choice(LAYOUTS)), weight, bias, 1e-5, None,
                   f"default plan {dtype} shape={shape} ({ops.describe_plan(v)})")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_many_instances_every_regime(ops, rng, dtype):
    """N*C > 65535 through each forced regime."""
    v = make_input((70000, 1, 2, 3), dtype, rng)
    plans = [(4, 256, 0)]
    if dtype != torch.float64:
        plans += [(2, 32, 1), (2, 128, 1)]
        if has_clusters():
            plans.append((2, 128, 2))
    for plan in plans:
        check_plan(ops, v, None, None, 1e-5, plan, f"plan={plan} {dtype}")


def test_describe_plan(ops):
    shapes = [((2, 3, 7, 7), torch.float32), ((4, 64, 64, 64), torch.float16),
              ((2, 4, 512, 512), torch.bfloat16), ((1, 1, 4000, 4000), torch.float32),
              ((112, 64, 512, 512), torch.float32), ((8, 8, 300, 300), torch.float64)]
    for shape, dtype in shapes:
        x = torch.empty(shape, dtype=dtype, device="cuda") if math.prod(shape) < 2**28 else \
            torch.empty(1, dtype=dtype, device="cuda").expand(shape)
        text = ops.describe_plan(x)
        assert isinstance(text, str) and text.strip(), f"{shape} {dtype}: {text!r}"


# =========================================================================== more than 2**31 elements

def need_free_memory(nbytes):
    free, _ = torch.cuda.mem_get_info()
    if free < nbytes:
        pytest.skip(f"needs {nbytes / 2**30:.1f} GiB free GPU memory, {free / 2**30:.1f} GiB free")


def check_instance_chunked(x_inst, y_inst, eps, what, rows=2048):
    """One (H, W) instance against float64, a block of rows at a time."""
    h = x_inst.shape[0]
    count = x_inst.numel()
    blocks = [slice(r, min(r + rows, h)) for r in range(0, h, rows)]
    mean = sum(x_inst[b].double().sum() for b in blocks) / count
    var = sum((x_inst[b].double() - mean).square().sum() for b in blocks) / count
    rstd = torch.rsqrt(var + eps)
    err2 = ref2 = 0.0
    max_abs = ref_max = 0.0
    for b in blocks:
        ref = (x_inst[b].double() - mean) * rstd
        diff = y_inst[b].double() - ref
        err2 += diff.square().sum().item()
        ref2 += ref.square().sum().item()
        max_abs = max(max_abs, diff.abs().max().item())
        ref_max = max(ref_max, ref.abs().max().item())
    rel_tol, abs_tol = TOL[x_inst.dtype]
    err = math.sqrt(err2 / ref2)
    assert err <= rel_tol, f"{what}: relative error {err:.3g}"
    assert max_abs <= abs_tol * max(1.0, ref_max), f"{what}: max abs error {max_abs:.3g}"


def test_more_than_2_31_elements_large_instances(inorm, rng):
    shape = (1, 2, 32768, 32769)  # float16, 2**31 + 65536 elements, 4 GiB
    nbytes = math.prod(shape) * 2
    need_free_memory(3 * nbytes)
    x = torch.randn(shape, dtype=torch.float16, device="cuda").mul_(rng.uniform(0.5, 2)).add_(rng.uniform(-3, 3))
    with torch.no_grad():
        y = inorm.ModelNew(2).cuda()(x)
    assert y.shape == x.shape and y.is_contiguous()
    for c in range(2):
        check_instance_chunked(x[0, c], y[0, c], 1e-5, f"instance {c}")
    del x, y
    torch.cuda.empty_cache()


def test_more_than_2_31_elements_many_instances(inorm, rng):
    shape = (65537, 1, 128, 256)  # float16, 2**31 + 32768 elements, 4 GiB
    nbytes = math.prod(shape) * 2
    need_free_memory(3 * nbytes)
    x = torch.randn(shape, dtype=torch.float16, device="cuda").mul_(rng.uniform(0.5, 2)).add_(rng.uniform(-3, 3))
    with torch.no_grad():
        y = inorm.ModelNew(1).cuda()(x)
    assert y.shape == x.shape and y.is_contiguous()
    step = 2048
    for start in range(0, shape[0], step):
        part = slice(start, start + step)
        assert_close_to(y[part], reference(x[part]), torch.float16, f"instances {start}..{start + step}")
    del x, y
    torch.cuda.empty_cache()


# =========================================================================== numerical soundness

def regime_input_shape(name, dtype, rng, n=4, c=8):
    return (n, c) + split_hw(regime_hw(name, dtype, rng), rng)


@pytest.mark.parametrize("regime", list(REGIMES))
def test_large_offset_accuracy(ops, rng, regime):
    """1e4 + randn in float32: no worse than twice PyTorch's own error (+1e-6)."""
    skip_unsupported_regime(regime, torch.float32)
    shape = regime_input_shape(regime, torch.float32, rng)
    x = 1e4 + torch.randn(shape, device="cuda")
    ref = reference(x)
    ours = rel_err(run_ops(ops, x, None, None, 1e-5, REGIMES[regime])[0], ref)
    eager = rel_err(F.instance_norm(x, eps=1e-5), ref)
    assert ours <= 2 * eager + 1e-6, f"shape={shape}: our error {ours:.3g}, eager's {eager:.3g}"


CONSTANTS = [0.0, 1.0, -2.5, 3.75, 1024.0]  # exactly representable, exact sums


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("regime", list(REGIMES))
def test_constant_instances(ops, rng, dtype, regime):
    """Constant instances normalize to exactly 0 (exactly the bias with affine); the other
    instances are unaffected."""
    skip_unsupported_regime(regime, dtype)
    shape = regime_input_shape(regime, dtype, rng, n=2, c=4)
    x = make_input(shape, dtype, rng)
    constant = torch.zeros(shape[:2], dtype=torch.bool)
    for n, c in [(0, 0), (1, 2), (1, 3)]:
        x[n, c] = rng.choice(CONSTANTS)
        constant[n, c] = True
    weight, bias = random_affine(shape[1], dtype, rng)
    y = run_ops(ops, x, weight, bias, 1e-5, REGIMES[regime])[0]
    for n, c in constant.nonzero().tolist():
        expected = torch.zeros_like(y[n, c]) if bias is None else torch.full_like(y[n, c], bias[c].item())
        assert torch.equal(y[n, c], expected), f"instance ({n},{c}) of {shape}: {y[n, c].flatten()[:4]}"
    mask = ~constant.cuda()
    assert_close_to(y[mask], reference(x, weight, bias)[mask], dtype, f"non-constant instances of {shape}")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("regime", list(REGIMES))
def test_nan_and_inf_like_eager(ops, rng, dtype, regime):
    """NaN / +inf / -inf poison only their own instance, with eager's NaN pattern."""
    skip_unsupported_regime(regime, dtype)
    shape = regime_input_shape(regime, dtype, rng, n=2, c=4)
    x = make_input(shape, dtype, rng)
    special = torch.zeros(shape[:2], dtype=torch.bool)
    for (n, c), value in zip([(0, 1), (1, 0), (1, 3)], [float("nan"), float("inf"), float("-inf")]):
        x[n, c, rng.randrange(shape[2]), rng.randrange(shape[3])] = value
        special[n, c] = True
    weight, bias = random_affine(shape[1], dtype, rng)
    y = run_ops(ops, x, weight, bias, 1e-5, REGIMES[regime])[0]
    expected = F.instance_norm(x, weight=weight, bias=bias, eps=1e-5)
    assert torch.equal(y.isnan(), expected.isnan()), "NaN pattern differs from eager"
    assert torch.equal(y.isinf(), expected.isinf()), "inf pattern differs from eager"
    clean = ~special.cuda()
    assert torch.isfinite(y[clean]).all(), "a special value leaked into another instance"
    assert_close_to(y[clean], reference(x, weight, bias)[clean], dtype, f"clean instances of {shape}")


@pytest.mark.parametrize("regime", list(REGIMES))
def test_deterministic(ops, rng, regime):
    for dtype in (torch.float32, torch.float16):
        skip_unsupported_regime(regime, dtype)
        shape = regime_input_shape(regime, dtype, rng)
        x = make_input(shape, dtype, rng)
        weight, bias = random_affine(shape[1], dtype, rng)
        first = run_ops(ops, x, weight, bias, 1e-5, REGIMES[regime])
        second = run_ops(ops, x, weight, bias, 1e-5, REGIMES[regime])
        assert torch.equal(first[0], second[0]) and torch.equal(first[1], second[1]), f"{dtype} {shape}"


def test_deterministic_module_sizes(inorm, rng):
    shapes = [(8, 16, 7, 7), (4, 8, 64, 64), (2, 4, 512, 512), (1, 1, 4000, 4000), (1, 2, 1024, 1024)]
    for shape in shapes:
        model = inorm.ModelNew(shape[1]).cuda()
        x = make_input(shape, torch.float32, rng)
        with torch.no_grad():
            assert torch.equal(model(x), model(x)), f"shape={shape}"


# =========================================================================== module features

@pytest.mark.parametrize("momentum", [0.1, None], ids=["m0.1", "mNone"])
@pytest.mark.parametrize("affine", [False, True], ids=["plain", "affine"])
def test_running_stats_like_eager(inorm, rng, momentum, affine):
    c = rng.randint(1, 12)
    kwargs = dict(momentum=momentum, affine=affine, track_running_stats=True, device="cuda")
    ours = inorm.ModelNew(c, **kwargs)
    eager = nn.InstanceNorm2d(c, **kwargs)
    with torch.no_grad():
        if affine:
            ours.weight.copy_(torch.randn(c) * 2)
            ours.bias.copy_(torch.randn(c))
        eager.load_state_dict(ours.state_dict())
        for step in range(3):
            shape = (rng.randint(1, 6), c, rng.randint(2, 80), rng.randint(2, 80))
            x = make_input(shape, torch.float32, rng, log_scale=(-0.5, 0.5))
            out, ref = ours(x), reference(x, ours.weight, ours.bias)
            assert_close_to(out, ref, torch.float32, f"step {step} shape={shape}")
            assert_matches_eager(out, eager(x), ref, torch.float32, f"step {step} shape={shape}")
        for name in ("running_mean", "running_var"):
            torch.testing.assert_close(getattr(ours, name), getattr(eager, name), rtol=1e-5, atol=1e-5, msg=name)
        assert torch.equal(ours.num_batches_tracked, eager.num_batches_tracked)

        ours.eval()
        eager.eval()
        x = make_input((3, c, 9, 11), torch.float32, rng, log_scale=(-0.5, 0.5))
        torch.testing.assert_close(ours(x), eager(x))


@pytest.mark.parametrize("affine", [False, True], ids=["plain", "affine"])
@pytest.mark.parametrize("track", [False, True], ids=["no_stats", "running_stats"])
def test_state_dict_both_ways_cuda(inorm, rng, affine, track):
    c = rng.randint(1, 16)
    kwargs = dict(affine=affine, track_running_stats=track, device="cuda")
    ours, eager = inorm.ModelNew(c, **kwargs), nn.InstanceNorm2d(c, **kwargs)
    assert list(ours.state_dict()) == list(eager.state_dict())
    with torch.no_grad():
        for tensor in eager.state_dict().values():
            if tensor.is_floating_point():
                tensor.copy_(torch.rand_like(tensor) + 0.5)
    ours.load_state_dict(eager.state_dict())
    for key, value in eager.state_dict().items():
        assert torch.equal(ours.state_dict()[key], value), key
    with torch.no_grad():
        for tensor in ours.state_dict().values():
            if tensor.is_floating_point():
                tensor.copy_(torch.rand_like(tensor) + 0.5)
    eager.load_state_dict(ours.state_dict())
    for key, value in ours.state_dict().items():
        assert torch.equal(eager.state_dict()[key], value), key
    x = make_input((2, c, 17, 19), torch.float32, rng)
    with torch.no_grad():
        for training in (True, False):
            ours.train(training)
            eager.train(training)
            assert_matches_eager(ours(x), eager(x), reference(x, ours.weight, ours.bias), torch.float32,
                                 f"training={training}")


def test_autograd_matches_eager(inorm, rng):
    """With grad mode on (whatever path ModelNew takes), outputs and gradients match eager."""
    c = 5
    ours = inorm.ModelNew(c, affine=True, device="cuda")
    eager = nn.InstanceNorm2d(c, affine=True, device="cuda")
    with torch.no_grad():
        ours.weight.copy_(torch.randn(c))
        ours.bias.copy_(torch.randn(c))
    eager.load_state_dict(ours.state_dict())
    x = make_input((3, c, 12, 13), torch.float32, rng, log_scale=(-0.5, 0.5))
    xo, xe = x.clone().requires_grad_(), x.clone().requires_grad_()
    grad = torch.randn_like(x)
    out = ours(xo)
    torch.testing.assert_close(out, eager(xe), rtol=1e-4, atol=1e-4)
    out.backward(grad)
    eager(xe).backward(grad)
    for name, got, expected in [("x", xo.grad, xe.grad), ("weight", ours.weight.grad, eager.weight.grad),
                                ("bias", ours.bias.grad, eager.bias.grad)]:
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4, msg=f"grad of {name}")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("track", [False, True], ids=["no_stats", "running_stats"])
def test_low_precision_module(inorm, rng, dtype, track):
    c = rng.randint(1, 16)
    ours = inorm.ModelNew(c, affine=True, track_running_stats=track).cuda().to(dtype)
    eager = nn.InstanceNorm2d(c, affine=True, track_running_stats=track).cuda().to(dtype)
    with torch.no_grad():
        ours.weight.copy_(torch.randn(c) * 2)
        ours.bias.copy_(torch.randn(c))
        eager.load_state_dict(ours.state_dict())
        x = make_input((rng.randint(1, 4), c, rng.randint(2, 100), rng.randint(2, 100)), dtype, rng,
                       log_scale=(-0.5, 0.5))
        out = ours(x)
        assert out.dtype == dtype
        ref = reference(x, ours.weight, ours.bias)
        assert_close_to(out, ref, dtype, "vs float64")
        assert_matches_eager(out, eager(x), ref, dtype, "half module")
        if track:
            for name in ("running_mean", "running_var"):
                torch.testing.assert_close(getattr(ours, name), getattr(eager, name), rtol=4e-3 if dtype == torch.float16 else 2e-2, atol=1e-3, msg=name)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("track", [False, True], ids=["no_stats", "running_stats"])
def test_float32_module_low_precision_input(inorm, rng, dtype, track):
    c = rng.randint(1, 16)
    ours = inorm.ModelNew(c, affine=True, track_running_stats=track).cuda()
    eager = nn.InstanceNorm2d(c, affine=True, track_running_stats=track).cuda()
    with torch.no_grad():
        ours.weight.copy_(torch.randn(c) * 2)
        ours.bias.copy_(torch.randn(c))
        eager.load_state_dict(ours.state_dict())
        x = make_input((rng.randint(1, 4), c, rng.randint(2, 100), rng.randint(2, 100)), dtype, rng,
                       log_scale=(-0.5, 0.5))
        try:
            expected = eager(x)
        except Exception as exc:  # noqa: BLE001
            pytest.skip(f"eager does not support this mix: {exc!r}")
        out = ours(x)
        assert out.dtype == expected.dtype
        ref = reference(x, ours.weight, ours.bias)
        assert_close_to(out, ref, dtype, "vs float64")
        assert_matches_eager(out, expected, ref, dtype, "mixed precision")
        if track:
            for name in ("running_mean", "running_var"):
                torch.testing.assert_close(getattr(ours, name), getattr(eager, name), rtol=1e-5, atol=1e-5, msg=name)


# =========================================================================== streams, graphs, devices

@pytest.mark.parametrize("shape", [(4, 8, 96, 97), (2, 2, 700, 700), (1, 1, 3000, 3001)], ids=str)
def test_non_default_stream(inorm, rng, shape):
    """Work is queued on the current stream: the input is written there after a long
    sleep, so a kernel on another stream would read the NaN it was created with."""
    c = shape[1]
    model = inorm.ModelNew(c, affine=True, device="cuda")
    with torch.no_grad():
        model.weight.copy_(torch.randn(c))
        model.bias.copy_(torch.randn(c))
    src = make_input(shape, torch.float32, rng)
    torch.cuda.synchronize()
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream), torch.no_grad():
        x = torch.full(shape, float("nan"), device="cuda")
        torch.cuda._sleep(100_000_000)
        x.copy_(src)
        y = model(x)
        torch.cuda.current_stream().synchronize()
    assert_close_to(y, reference(src, model.weight, model.bias), torch.float32, f"shape={shape}")
    torch.cuda.synchronize()


@pytest.mark.parametrize("shape", [(2, 3, 17, 19), (4, 8, 64, 64), (2, 4, 512, 512), (1, 2, 3000, 3000)], ids=str)
def test_cuda_graph_capture(inorm, rng, shape):
    c = shape[1]
    model = inorm.ModelNew(c, affine=True, device="cuda")
    with torch.no_grad():
        model.weight.copy_(torch.randn(c))
        model.bias.copy_(torch.randn(c))
    x = make_input(shape, torch.float32, rng)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), torch.no_grad():
        model(x)  # warm up outside the capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph), torch.no_grad():
        y = model(x)
    for replay in range(2):
        x.copy_(make_input(shape, torch.float32, rng))
        graph.replay()
        torch.cuda.synchronize()
        with torch.no_grad():
            ref = reference(x, model.weight, model.bias)
            assert_close_to(y, ref, torch.float32, f"replay {replay}")
            assert_matches_eager(y, F.instance_norm(x, weight=model.weight, bias=model.bias), ref,
                                 torch.float32, f"replay {replay}")


def test_other_device(inorm, ops, rng):
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs")
    device = torch.device("cuda:1")
    torch.cuda.set_device(0)
    for shape in [(3, 5, 9, 11), (2, 4, 512, 512), (1, 1, 3000, 3000)]:
        c = shape[1]
        model = inorm.ModelNew(c, affine=True, device=device)
        x = make_input(shape, torch.float32, rng, device=device)
        with torch.no_grad():
            y = model(x)
        assert y.device == device and torch.cuda.current_device() == 0
        assert_close_to(y, reference(x, model.weight, model.bias), torch.float32, f"cuda:1 shape={shape}")
        assert_close_to(ops.forward(x, None, None, 1e-5)[0], reference(x), torch.float32, f"ops cuda:1 {shape}")
        if has_clusters(device):
            y2 = ops.forward_with_plan(x[:, :, :40, :40].contiguous(), None, None, 1e-5, 2, 128, 2)[0]
            assert_close_to(y2, reference(x[:, :, :40, :40]), torch.float32, "cluster plan on cuda:1")
    torch.cuda.synchronize(device)


# =========================================================================== errors

BAD_INPUTS = {
    "2d": lambda c: torch.randn(c, 5, device="cuda"),
    "5d": lambda c: torch.randn(2, c, 3, 3, 3, device="cuda"),
    "1x1": lambda c: torch.randn(2, c, 1, 1, device="cuda"),
    "1x1_unbatched": lambda c: torch.randn(c, 1, 1, device="cuda"),
    "int64": lambda c: torch.randint(-5, 5, (2, c, 3, 3), device="cuda"),
    "bool": lambda c: torch.randint(0, 2, (2, c, 3, 3), device="cuda").bool(),
    "wrong_c_affine": lambda c: torch.randn(2, c + 1, 4, 4, device="cuda"),
}
DTYPE_ERRORS = {"int64", "bool"}


BAD_CASES = [(name, affine) for name in sorted(BAD_INPUTS) for affine in (False, True)
             if affine or name != "wrong_c_affine"]  # wrong C without affine only warns


@pytest.mark.parametrize("name,affine", BAD_CASES, ids=[f"{n}-{'affine' if a else 'plain'}" for n, a in BAD_CASES])
def test_bad_inputs_raise_like_eager(inorm, rng, name, affine):
    c = rng.randint(1, 6)
    ours = inorm.ModelNew(c, affine=affine, device="cuda")
    eager = nn.InstanceNorm2d(c, affine=affine, device="cuda")
    x = BAD_INPUTS[name](c)
    with torch.no_grad():
        with pytest.raises(Exception) as expected:
            eager(x)
        with pytest.raises(Exception) as got:
            ours(x)
    if name in DTYPE_ERRORS:
        assert isinstance(got.value, expected.type), f"{got.value!r} vs eager {expected.value!r}"
    else:
        assert got.type is expected.type, f"{got.value!r} vs eager {expected.value!r}"
    # the CUDA context still works
    good = make_input((2, c, 6, 7), torch.float32, rng)
    with torch.no_grad():
        out = ours(good)
    torch.cuda.synchronize()
    assert_close_to(out, reference(good, ours.weight, ours.bias), torch.float32, "after the error")


def test_wrong_channels_without_affine_warns_cuda(inorm, rng):
    ours = inorm.ModelNew(4, device="cuda")
    x = make_input((2, 6, 5, 5), torch.float32, rng)
    with pytest.warns(UserWarning), torch.no_grad():
        out = ours(x)
    assert_close_to(out, reference(x), torch.float32, "wrong C, affine=False")


# =========================================================================== harness

def test_harness_main_shape(submission):
    ns = submission
    need_free_memory(48 * 2**30)
    model = ns["ModelNew"](*ns["get_init_inputs"]()).cuda()
    eager = nn.InstanceNorm2d(64).cuda()
    for draw in range(3):
        (x,) = ns["get_inputs"]()
        x = x.cuda()
        with torch.no_grad():
            out = model(x)
            ref = eager(x)
        assert out.shape == x.shape and out.dtype == x.dtype and out.is_contiguous()
        assert torch.allclose(out, ref, atol=1e-2, rtol=1e-2), f"draw {draw}"
        for part in (slice(0, 1), slice(-1, None)):  # tight check on two samples
            assert_close_to(out[part], reference(x[part]), torch.float32, f"draw {draw} batch {part}")
        del x, out, ref
        torch.cuda.empty_cache()
