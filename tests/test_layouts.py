"""Layouts and ranks (issue 11): channels-last input served in place, InstanceNorm1d / InstanceNorm3d (GPU).

The channel-last plans (cl_onchip, cl_split) read channels-last dense input as it is and write the output
in that layout; every other input, and every forced NCHW plan, goes through NCHW and gives a contiguous
output (conftest.is_channels_last_dense / expect_layout state the rule). The ops take any rank >= 3:
an instance is (n, c) over all spatial elements, stats are (2, N*C) at n*C + c.

Every result is checked against float64 (reference_nd; gradients by float64 autograd through it) and,
where PyTorch has the module, against nn.InstanceNorm{1,2,3}d. Inputs are fresh random tensors (seeds
in conftest.py); memory around a strided view is NaN and outputs are allocated over a NaN-poisoned block,
so stray reads and unwritten elements show up.
"""

import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from conftest import (ACT_REF, capture_no_grad, near_kink, assert_close_to, assert_matches_eager, assert_stats_close, channels_last_strides,
                      check_grads, CL_REGIMES, DTYPES, expect_layout, is_channels_last_dense, keeps_layout,
                      make_input, natural_dx, natural_y, poison_allocator, reference, reference_nd, regime_hw, REGIMES,
                      rel_err, run_ops, skip_unsupported_regime, split_hw)

pytestmark = pytest.mark.requires_cuda

EPS = 1e-5
ACTS = ("identity", "relu", "leaky_relu", "silu", "gelu", "gelu_tanh")  # index == the ops' act code
SLOPES = [0.0, 0.01, 0.2, 1.0, -0.3]
RANKS = [1, 2, 3]  # spatial dims: InstanceNorm1d, 2d (ModelNew), 3d
LAYOUTS = ["contiguous", "channels_last", "cl_offset"]
CL_LAYOUTS = ["channels_last", "cl_offset"]

# Every C class (1: never channels-last dense; odd: no 16-byte vectors along C; 8 and 64: vectors;
# 130: more than one tile of channels), odd spatial sizes, spatial dims of size 1, N = 1.
SHAPES = {
    1: [(2, 1, 37), (1, 2, 5), (3, 3, 1001), (2, 5, 2), (1, 7, 129), (2, 8, 64), (2, 64, 49), (1, 130, 17)],
    2: [(2, 1, 7, 9), (1, 2, 5, 3), (2, 3, 7, 7), (1, 5, 13, 1), (2, 7, 1, 33), (2, 8, 32, 32), (1, 64, 7, 7),
        (2, 130, 9, 11)],
    3: [(1, 1, 3, 5, 7), (2, 2, 3, 3, 3), (1, 3, 5, 1, 9), (2, 4, 9, 10, 11), (2, 5, 4, 4, 4), (1, 7, 3, 5, 7),
        (2, 8, 4, 4, 4), (1, 64, 3, 3, 5), (2, 130, 2, 3, 5)],
}
BACKWARD_SHAPES = {
    1: [(2, 5, 37), (1, 130, 9), (3, 8, 20)],
    2: [(2, 3, 7, 9), (2, 1, 6, 7), (1, 64, 5, 5), (2, 8, 16, 17)],
    3: [(2, 4, 9, 10, 11), (1, 7, 3, 4, 5)],
}



# =========================================================================== helpers

def with_layout_nd(v, layout):
    """A tensor equal to v (N, C, *spatial) in `layout`: "contiguous"; "channels_last" (dense, C innermost,
    any rank); "cl_offset" (channels-last strides one element into a NaN buffer, so not 16-byte aligned);
    "padded" (the last dim padded by one NaN: neither layout). Memory outside the view is NaN."""
    shape = tuple(v.shape)
    nan = float("nan")
    if layout == "contiguous":
        return v.clone()
    if layout == "channels_last":
        x = torch.empty_strided(shape, channels_last_strides(shape), dtype=v.dtype, device=v.device)
    elif layout == "cl_offset":
        flat = torch.full((v.numel() + 2,), nan, dtype=v.dtype, device=v.device)
        x = flat.as_strided(shape, channels_last_strides(shape), 1)
    elif layout == "padded":
        x = torch.full(shape[:-1] + (shape[-1] + 1,), nan, dtype=v.dtype, device=v.device)[..., 1:]
    else:
        raise ValueError(layout)
    x.copy_(v)
    return x


def outside_intact(x):
    """The NaN around a with_layout_nd view is all still there (x itself is finite)."""
    base = x._base
    return base is None or base.isnan().sum().item() == base.numel() - x.numel()


def per_channel(x):
    return (-1,) + (1,) * (x.dim() - 2)


def affine_params(c, dtype):
    return (torch.randn(c, device="cuda") * 2).to(dtype), torch.randn(c, device="cuda").to(dtype)


def module_classes(inorm, rank):
    """(ours, PyTorch's) module class for `rank` spatial dims."""
    return {1: (inorm.InstanceNorm1d, nn.InstanceNorm1d), 2: (inorm.ModelNew, nn.InstanceNorm2d),
            3: (inorm.InstanceNorm3d, nn.InstanceNorm3d)}[rank]


def module_pair(inorm, rank, c, dtype=torch.float32, **kwargs):
    """Ours and PyTorch's module with the same arguments and the same random state."""
    ours_cls, eager_cls = module_classes(inorm, rank)
    ours = ours_cls(c, device="cuda", dtype=dtype, **kwargs)
    eager = eager_cls(c, device="cuda", dtype=dtype, **kwargs)
    with torch.no_grad():
        if ours.affine:
            ours.weight.copy_(torch.randn(c) * 2)
            ours.bias.copy_(torch.randn(c))
        if ours.track_running_stats:
            ours.running_mean.copy_(torch.randn(c))
            ours.running_var.copy_(torch.rand(c) + 0.5)
    eager.load_state_dict(ours.state_dict())
    return ours, eager


def ref_fused_nd(x, w, b, r=None, act="identity", slope=0.0, eps=EPS, running=None):
    """float64 act(norm(x) * w + b) + r, the pre-activation z (in the graph) and the leaves [x, w?, b?, r?].
    `running` = (running_mean, running_var): eval mode's statistics instead of the instance's."""
    xd, wd, bd, rd = (None if t is None else t.detach().double().requires_grad_() for t in (x, w, b, r))
    if running is None:
        z = reference_nd(xd, wd, bd, eps)
    else:
        rm, rv = (t.detach().double().view(per_channel(x)) for t in running)
        z = (xd - rm) * torch.rsqrt(rv + eps)
        z = z if wd is None else z * wd.view(per_channel(x))
        z = z if bd is None else z + bd.view(per_channel(x))
    y = ACT_REF[act](z, slope)
    y = y if rd is None else y + rd
    return y, z, [t for t in (xd, wd, bd, rd) if t is not None]


def kink_safe(dy, z, act):
    """dy zeroed (in place, keeping its layout) where relu's / leaky_relu's kink is not fixed by the input
    (conftest.near_kink)."""
    if act in ("relu", "leaky_relu"):
        dy.masked_fill_(near_kink(z).to(dy.device), 0)
    return dy


def grad_names(w, r=None):
    return ["x"] + (["weight", "bias"] if w is not None else []) + (["residual"] if r is not None else [])




def check_forward(y, stats, x, v, w, b, plan, what, eps=EPS, eager=None):
    """One forward result (ops or module) for input x (== v): layout, no aliasing, input untouched, values
    (`eager`, where given, as in assert_close_to: PyTorch's output of the same call, whose error widens
    the bounds on ill-conditioned instances)."""
    assert y.dtype == x.dtype and y.device == x.device, what
    expect_layout(y, x, plan, what)
    assert y.untyped_storage().data_ptr() != x.untyped_storage().data_ptr(), f"{what}: output aliases the input"
    assert torch.equal(x, v) and outside_intact(x), f"{what}: the input was modified"
    assert torch.isfinite(y).all(), f"{what}: non-finite output for finite input"
    ref = reference_nd(v, w, b, eps)
    # natural_y's per-element sizes need the batch dimension (unbatched input goes without).
    natural = (lambda: natural_y(v, ref, w, b, eps)) if v.dim() >= 3 else None
    assert_close_to(y, ref, x.dtype, what, eager=eager, natural=natural)
    if stats is not None:
        assert_stats_close(stats, v, eps, what)


def reference_grads(v, w, b, dy, r=None, act="identity", slope=0.0, running=None):
    """float64 gradients [dx, dw?, db?, dr?] and the natural size of dx's terms."""
    y_ref, z, leaves = ref_fused_nd(v, w, b, r, act, slope, running=running)
    *ref, g_z = torch.autograd.grad(y_ref, leaves + [z], dy.double())
    return ref, natural_dx(v, w, g_z)


def randn_in(shape, dtype, layout):
    """A random tensor (grad_output, residual) in `layout`."""
    return with_layout_nd(torch.randn(shape, device="cuda").to(dtype), layout)


def grads_of(model, x, dy):
    """model(x) and the gradients of x, weight and bias for grad_output dy."""
    leaf = x.detach().requires_grad_()
    y = model(leaf)
    return y, torch.autograd.grad(y, [leaf, model.weight, model.bias], dy)


def ours_and_eager(ours, eager, x, dy):
    """grads_of both modules. PyTorch's gets dy contiguous: its weight gradient is wrong for N == 1 with a
    channels-last dy (seen on CPU with torch 2.14), and the tight check is against float64 anyway."""
    return grads_of(ours, x, dy), grads_of(eager, x, dy.contiguous())


@pytest.fixture
def fresh_dynamo():
    import torch._dynamo

    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


# =========================================================================== the layout rule itself

def test_layout_helpers():
    """The test helpers agree with PyTorch's memory formats (so expect_layout states issue 11's rule)."""
    for shape, fmt in (((2, 3, 4, 5), torch.channels_last), ((2, 3, 4, 5, 6), torch.channels_last_3d)):
        x = torch.randn(shape, device="cuda").contiguous(memory_format=fmt)
        assert x.stride() == channels_last_strides(shape) and is_channels_last_dense(x)
        assert with_layout_nd(x, "cl_offset").is_contiguous(memory_format=fmt)
        assert not is_channels_last_dense(x.contiguous())
    x = torch.randn(2, 3, 9, device="cuda").transpose(1, 2).contiguous().transpose(1, 2)
    assert is_channels_last_dense(x) and with_layout_nd(x, "channels_last").stride() == x.stride()
    for shape in ((2, 1, 4, 5), (2, 3, 1, 1), (2, 1, 9), (2, 3, 1)):  # C == 1 or M == 1: contiguous as well
        x = with_layout_nd(torch.randn(shape, device="cuda"), "channels_last")
        assert x.is_contiguous() and not is_channels_last_dense(x)
    assert with_layout_nd(torch.randn(2, 3, 4, 5, device="cuda"), "cl_offset").data_ptr() % 16 != 0


# =========================================================================== forward: ops and modules

@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("rank", RANKS)
def test_ops_forward(ops, rng, rank, layout, dtype):
    """ops.forward on every C class and rank, with and without affine: output (x's channels-last layout
    when channels-last dense, else contiguous), statistics at n*C + c."""
    for shape in SHAPES[rank]:
        v = make_input(shape, dtype, rng)
        x = with_layout_nd(v, layout)
        if layout != "contiguous":
            assert is_channels_last_dense(x) == (shape[1] > 1 and math.prod(shape[2:]) > 1)
        for affine in (False, True):
            w, b = affine_params(shape[1], dtype) if affine else (None, None)
            poison_allocator(v.numel() * v.element_size())
            y, stats = ops.forward(x, w, b, EPS)
            check_forward(y, stats, x, v, w, b, None, f"ops.forward {dtype} {layout} shape={shape} affine={affine}")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_ops_more_spatial_dims(ops, rng, layout, dtype):
    """The ops take any rank >= 3: four spatial dims, forward and backward."""
    for shape in [(2, 3, 3, 4, 5, 2), (1, 8, 2, 3, 2, 3), (2, 5, 1, 3, 1, 7)]:
        v = make_input(shape, dtype, rng)
        x = with_layout_nd(v, layout)
        w, b = affine_params(shape[1], dtype)
        what = f"{dtype} {layout} shape={shape}"
        poison_allocator(v.numel() * v.element_size())
        y, stats = ops.forward(x, w, b, EPS)
        check_forward(y, stats, x, v, w, b, None, what)
        dy = randn_in(shape, dtype, layout)
        ref, natural = reference_grads(v, w, b, dy)
        poison_allocator(v.numel() * v.element_size())
        dx, dw, db = ops.backward(dy, x, w, b, stats)
        expect_layout(dx, x, None, f"{what} dx")
        check_grads([dx, dw, db], ref, grad_names(w), dtype, f"{what} backward", natural)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("rank", RANKS)
def test_module_forward(inorm, rng, rank, layout, dtype):
    """InstanceNorm1d / ModelNew / InstanceNorm3d against float64 and nn.InstanceNorm{1,2,3}d."""
    for shape in SHAPES[rank]:
        affine, training = rng.random() < 0.5, rng.random() < 0.7
        ours, eager = module_pair(inorm, rank, shape[1], dtype, affine=affine)
        ours.train(training)
        eager.train(training)
        v = make_input(shape, dtype, rng)
        x = with_layout_nd(v, layout)
        what = f"{type(ours).__name__} {dtype} {layout} shape={shape} affine={affine} train={training}"
        with torch.no_grad():
            poison_allocator(v.numel() * v.element_size())
            out = ours(x)
            # An InstanceNorm1d float32 (2, 5, 2) output missed 1e-5 relative (1.38e-5) on H*W = 2
            # instances of nearly equal values, where PyTorch's own float32 error is of that size too.
            check_forward(out, None, x, v, ours.weight, ours.bias, None, what, eager=lambda: eager(x))
            assert_matches_eager(out, eager(x), reference_nd(v, ours.weight, ours.bias), dtype, what)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
@pytest.mark.parametrize("shape", [(2, 4, 9, 10, 11), (3, 5, 1001)], ids=str)
def test_issue_shapes(inorm, rng, shape, layout, dtype):
    """The issue's shapes: InstanceNorm3d on (2, 4, 9, 10, 11), InstanceNorm1d on (3, 5, 1001); forward
    and gradients against float64 and PyTorch."""
    rank = len(shape) - 2
    ours, eager = module_pair(inorm, rank, shape[1], dtype, affine=True)
    v = make_input(shape, dtype, rng, log_scale=(-0.5, 0.5))
    x = with_layout_nd(v, layout)
    dy = randn_in(shape, dtype, layout)
    what = f"{type(ours).__name__} {dtype} {layout}"
    (y, grads), (y_eager, grads_eager) = ours_and_eager(ours, eager, x, dy)
    ref_y = reference_nd(v, ours.weight, ours.bias)
    expect_layout(y, x, None, what)
    assert_close_to(y, ref_y, dtype, what)
    assert_matches_eager(y, y_eager, ref_y, dtype, what)
    expect_layout(grads[0], x, None, f"{what} dx")
    ref, natural = reference_grads(v, ours.weight, ours.bias, dy)
    check_grads(grads, ref, grad_names(ours.weight), dtype, what, natural)
    for name, got, expected, want in zip(grad_names(ours.weight), grads, grads_eager, ref):
        assert_matches_eager(got, expected, want, dtype, f"{what}: grad of {name}", name)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_cl_split_sweep_hard_data(inorm, rng, dtype):
    """cl_split's partial sweep (shifted sums re-centred every few batches after a first two-sweep
    batch, see cl_shifted_sweep) on data that punishes shifted sums, at a size where each thread's
    chunk spans several re-centred blocks (a tensor of about 2 GiB: the chunks grow with the tensor):
    constant channels stay exactly the bias, large-offset channels (1e4 + randn) and channels with an
    outlier band at the start of every 4096 rows are no worse than twice eager's own error (+1e-6; relative
    L2 over the group's instances) or within TOL_CL of float64, and the rest is within tolerance of float64. Whether a band falls in a
    thread's first batch depends on the device's chunking; the sweep's bound holds for any data."""
    free, _ = torch.cuda.mem_get_info()
    if free < 16 * 2**30:
        pytest.skip(f"needs 16 GiB free GPU memory, {free / 2**30:.1f} GiB free")
    n, c, h, w = (8, 64, 1024, 1024) if dtype == torch.float32 else (16, 64, 1024, 1024)
    x = torch.randn(n, h, w, c, device="cuda", dtype=dtype).permute(0, 3, 1, 2)  # channels-last dense
    constants = {ch: rng.choice(CONSTANTS_CL) for ch in range(4)}
    with torch.no_grad():
        for ch, value in constants.items():
            x[:, ch] = value
        x[:, 4:16] += 1e4 if dtype == torch.float32 else 100.0
        band = x[:, 16:32].view(n, 16, h * w // 4096, 4096)
        band[..., :64] += 300.0
    weight = torch.randn(c, device="cuda", dtype=dtype)
    bias = torch.randn(c, device="cuda", dtype=dtype)
    plan = inorm.Plan.cl_split()
    y = inorm.forward_with_plan(x, weight, bias, EPS, plan)[0]
    assert y.is_contiguous(memory_format=torch.channels_last)
    for ch, value in constants.items():
        assert torch.equal(y[:, ch], bias[ch].expand(n, h, w)), f"constant channel {ch} ({value})"
    for lo, hi, what in ((4, 16, "large offset"), (16, 32, "outlier bands"), (32, 64, "randn")):
        # Relative L2 over every sample of the group (one sample's dozen means is too few: at 1e4 a
        # float32 mean is off by up to half an ulp, 5e-4, for eager as for us, however it is summed).
        sq = {"ours": 0.0, "eager": 0.0, "ref": 0.0}
        for i in range(n):
            part = x[i:i + 1, lo:hi]
            ref = reference(part, weight[lo:hi], bias[lo:hi])
            eager = F.instance_norm(part.contiguous(), weight=weight[lo:hi], bias=bias[lo:hi], eps=EPS)
            sq["ours"] += (y[i:i + 1, lo:hi].double() - ref).square().sum().item()
            sq["eager"] += (eager.double() - ref).square().sum().item()
            sq["ref"] += ref.square().sum().item()
            del ref, eager
        ours, eager = math.sqrt(sq["ours"] / sq["ref"]), math.sqrt(sq["eager"] / sq["ref"])
        assert ours <= 2 * eager + 1e-6 or ours <= TOL_CL[dtype], f"{what}: ours {ours:.3g}, eager {eager:.3g}"
        if lo != 4:  # at 1e4 + randn a float32 mean alone is off by 5e-4 of sigma, for eager as for us
            assert_close_to(y[:1, lo:hi], reference(x[:1, lo:hi], weight[lo:hi], bias[lo:hi]), dtype, f"{what} {dtype}")


CONSTANTS_CL = [0.0, 1.0, -2.5, 3.75, 1024.0]  # exactly representable in every dtype
TOL_CL = {torch.float32: 2e-6, torch.bfloat16: 4e-3}


# =========================================================================== plans

CANDIDATE_SHAPES = [(2, 64, 7, 7), (2, 8, 32, 32), (2, 130, 7, 7), (1, 3, 200, 200), (2, 4, 9, 10, 11),
                    (3, 5, 1001), (2, 7, 33)]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("backward", [False, True], ids=["forward", "backward"])
def test_candidate_plans_channels_last(inorm, ops, rng, backward, dtype):
    """On channels-last dense input the host lists only channel-last plans, always cl_split, the chosen
    plan among them; each runs (forward_with_plan / backward_with_plan) and is right, in x's layout."""
    for shape in CANDIDATE_SHAPES:
        for layout in CL_LAYOUTS:
            v = make_input(shape, dtype, rng)
            x = with_layout_nd(v, layout)
            what = f"{dtype} {layout} shape={shape}"
            plans = inorm.candidate_plans(x, backward)
            if keeps_layout(x):  # else the NCHW plans (the heuristic's choice) are listed too
                assert all(p.regime in CL_REGIMES for p in plans), f"{what}: {[str(p) for p in plans]}"
            assert inorm.Plan.cl_split() in plans, f"{what}: {[str(p) for p in plans]}"
            chosen = inorm.chosen_plan(x, backward)
            assert chosen in plans, what
            if not keeps_layout(x):  # C does not fill 16-byte vectors, or 1-D: the NCHW kernels by default
                assert chosen.regime not in CL_REGIMES, f"{what}: chose {chosen}"
            assert set(inorm.candidate_plans(x, backward, tight=True)) <= set(plans), what
            # The NCHW plans are test_gpu.py's; here the channel-last ones and the chosen one.
            plans = list(dict.fromkeys([p for p in plans if p.regime in CL_REGIMES] + [chosen]))
            w, b = affine_params(shape[1], dtype) if rng.random() < 0.7 else (None, None)
            if not backward:
                for plan in plans:
                    assert inorm.plan_refusal(x, plan) == "", f"{what}: {plan} listed but refused"
                    poison_allocator(v.numel() * v.element_size())
                    y, stats = inorm.forward_with_plan(x, w, b, EPS, plan)
                    check_forward(y, stats, x, v, w, b, plan, f"{what} {plan}")
                continue
            dy = randn_in(shape, dtype, layout)
            _, stats = ops.forward(x, w, b, EPS)
            ref, natural = reference_grads(v, w, b, dy)
            for plan in plans:
                assert inorm.plan_refusal(x, plan, True) == "", f"{what}: {plan} listed but refused"
                poison_allocator(v.numel() * v.element_size())
                dx, dw, db = inorm.backward_with_plan(dy, x, w, b, stats, plan)
                expect_layout(dx, x, plan, f"{what} {plan} dx")
                if w is None:
                    assert dw.numel() == 0 and db.numel() == 0, f"{what} {plan}: dweight/dbias without affine"
                check_grads([dx, dw, db], ref, grad_names(w), dtype, f"{what} {plan} backward", natural)


def all_cl_plans(inorm):
    return [inorm.Plan.cl_split()] + [inorm.Plan.cl_onchip(k, t) for k in (2, 4, 8) for t in (128, 256, 512)]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("backward", [False, True], ids=["forward", "backward"])
def test_cl_plan_space_consistent(inorm, ops, rng, backward, dtype):
    """Every channel-last plan is listed exactly when plan_refusal accepts it, a refused one raises, and
    cl_onchip is offered for a small instance (7x7) but not for a large one (200x200)."""
    for shape in [(2, 64, 7, 7), (2, 8, 32, 32), (1, 3, 200, 200), (3, 5, 1001), (2, 4, 9, 10, 11)]:
        x = with_layout_nd(make_input(shape, dtype, rng), "channels_last")
        listed = set(inorm.candidate_plans(x, backward))
        stats = ops.forward(x, None, None, EPS)[1]
        dy = torch.randn_like(x)
        for plan in all_cl_plans(inorm):
            refusal = inorm.plan_refusal(x, plan, backward)
            what = f"{dtype} shape={shape} {plan} backward={backward}"
            assert (refusal == "") == (plan in listed), f"{what}: refusal {refusal!r}, listed {plan in listed}"
            if refusal:
                with pytest.raises(RuntimeError):
                    if backward:
                        inorm.backward_with_plan(dy, x, None, None, stats, plan)
                    else:
                        inorm.forward_with_plan(x, None, None, EPS, plan)
        onchip = [p for p in listed if p.regime == "cl_onchip"]
        if shape[2:] == (200, 200):
            assert not onchip, f"{dtype} {shape}: cl_onchip listed for 40000 rows: {onchip}"
        if shape == (2, 64, 7, 7) and dtype == torch.float32 and not backward:
            assert onchip, f"{shape}: no cl_onchip plan for a 7x7 instance"


NCHW_REGIMES = [name for name in REGIMES if name != "default"]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("regime", NCHW_REGIMES)
def test_nchw_plans_on_channels_last_input(inorm, ops, rng, regime, dtype):
    """A forced NCHW plan copies channels-last input to NCHW and returns a contiguous output, as before."""
    skip_unsupported_regime(regime, dtype)
    plan = REGIMES[regime]
    shapes = [(2, 3) + split_hw(regime_hw(regime, dtype, rng), rng)]
    if regime == "multi_cta":  # no capacity limit: the other ranks too
        shapes += [(2, 5, 301), (2, 4, 3, 5, 7)]
    for shape in shapes:
        v = make_input(shape, dtype, rng)
        layout = rng.choice(CL_LAYOUTS)
        x = with_layout_nd(v, layout)
        w, b = affine_params(shape[1], dtype)
        what = f"{plan} {dtype} {layout} shape={shape}"
        poison_allocator(v.numel() * v.element_size())
        y, stats = run_ops(ops, x, w, b, EPS, plan)
        check_forward(y, stats, x, v, w, b, plan, what)
        backward = inorm.Plan.multi_cta()
        dy = randn_in(shape, dtype, layout)
        ref, natural = reference_grads(v, w, b, dy)
        dx, dw, db = inorm.backward_with_plan(dy, x, w, b, stats, backward)
        expect_layout(dx, x, backward, f"{what} dx")
        check_grads([dx, dw, db], ref, grad_names(w), dtype, f"{what} backward", natural)


def nan_buffer(shape, dtype):
    return torch.full(shape, float("nan"), dtype=dtype, device="cuda")


def near_channels_last(dtype):
    """(name, view) pairs of shape (2, 3, 6, 7) that are NOT channels-last dense, most of them nearly so;
    memory outside each view NaN."""
    return [
        ("contiguous", nan_buffer((2, 3, 6, 7), dtype)),
        ("c1_channels_last", with_layout_nd(nan_buffer((2, 1, 6, 7), dtype), "channels_last")),
        ("padded_c", nan_buffer((2, 6, 7, 4), dtype)[..., :3].permute(0, 3, 1, 2)),
        ("padded_n", nan_buffer((2 * 126 + 5,), dtype).as_strided((2, 3, 6, 7), (131, 1, 21, 3))),
        ("spatial_swapped", nan_buffer((2, 7, 6, 3), dtype).permute(0, 3, 2, 1)),
        ("padded_w", nan_buffer((2, 6, 8, 3), dtype)[:, :, 1:, :].permute(0, 3, 1, 2)),
        ("strided_c", nan_buffer((2, 6, 7, 6), dtype)[..., ::2].permute(0, 3, 1, 2)),
        ("transposed_hw", nan_buffer((2, 3, 7, 6), dtype).transpose(2, 3)),
    ]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64], ids=str)
def test_cl_plans_refuse_other_layouts(inorm, ops, rng, dtype):
    """Inputs that are not channels-last dense (nearly channels-last ones included): no channel-last plan
    is listed, forcing one raises a RuntimeError that says "channels-last", and the default path gives a
    contiguous, right output."""
    cases = near_channels_last(dtype)
    cases += [("rank1_contiguous", nan_buffer((2, 3, 9), dtype)),
              ("rank3_contiguous", nan_buffer((2, 3, 3, 4, 5), dtype))]
    for name, x in cases:
        v = make_input(tuple(x.shape), dtype, rng)
        x.copy_(v)
        what = f"{name} {dtype} strides={x.stride()}"
        assert not is_channels_last_dense(x), what
        for backward in (False, True):
            regimes = {p.regime for p in inorm.candidate_plans(x, backward)}
            assert not regimes & set(CL_REGIMES), f"{what}: listed {regimes}"
        _, stats = ops.forward(x, None, None, EPS)
        dy = torch.randn(x.shape, device="cuda").to(dtype)
        for plan in (inorm.Plan.cl_split(), inorm.Plan.cl_onchip(2, 128)):
            assert inorm.plan_refusal(x, plan) != "" and inorm.plan_refusal(x, plan, True) != "", f"{what} {plan}"
            with pytest.raises(RuntimeError, match="channels-last"):
                inorm.forward_with_plan(x, None, None, EPS, plan)
            with pytest.raises(RuntimeError, match="channels-last"):
                inorm.backward_with_plan(dy, x, None, None, stats, plan)
        poison_allocator(v.numel() * v.element_size())
        y, stats = ops.forward(x, None, None, EPS)
        check_forward(y, stats, x, v, None, None, None, what)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
def test_channels_last_rule_edge_cases(inorm, ops, rng, dtype):
    """Channels-last dense by the rule though not made by .contiguous(): a batch slice (storage offset,
    stride[0] still C*M) and arbitrary strides on dims of size 1. Channel-last plans, x's strides out."""
    big = with_layout_nd(torch.zeros(4, 3, 6, 7, device="cuda", dtype=dtype), "channels_last")
    cases = [
        ("batch_slice", big[1:3]),
        ("size1_h", nan_buffer((64,), dtype).as_strided((2, 3, 1, 7), (21, 1, 999, 3))),
        ("size1_n", nan_buffer((64,), dtype).as_strided((1, 5, 4, 3), (7, 1, 15, 5))),
        ("size1_d", nan_buffer((128,), dtype).as_strided((2, 4, 3, 1, 5), (60, 1, 20, 77, 4))),
    ]
    for name, x in cases:
        v = make_input(tuple(x.shape), dtype, rng)
        x.copy_(v)
        what = f"{name} {dtype} shape={tuple(x.shape)} strides={x.stride()}"
        assert is_channels_last_dense(x), what
        plans = inorm.candidate_plans(x)
        assert plans and inorm.Plan.cl_split() in plans, f"{what}: {[str(p) for p in plans]}"
        if keeps_layout(x):
            assert all(p.regime in CL_REGIMES for p in plans), f"{what}: {[str(p) for p in plans]}"
        w, b = affine_params(x.shape[1], dtype)
        for plan in [None] + [p for p in plans if p.regime in CL_REGIMES]:
            poison_allocator(v.numel() * v.element_size())
            y, stats = ops.forward(x, w, b, EPS) if plan is None else inorm.forward_with_plan(x, w, b, EPS, plan)
            expect_layout(y, x, plan, f"{what} {plan}")
            assert torch.equal(x, v), f"{what}: the input was modified"
            assert_close_to(y, reference_nd(v, w, b), dtype, f"{what} {plan}")
            assert_stats_close(stats, v, EPS, f"{what} {plan}")


# =========================================================================== backward

@pytest.mark.parametrize("affine", [False, True], ids=["plain", "affine"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("rank", RANKS)
def test_module_backward(inorm, rng, rank, layout, dtype, affine):
    """Autograd through the modules: dx (in x's layout), dweight, dbias against float64 autograd."""
    for shape in BACKWARD_SHAPES[rank]:
        ours, _ = module_pair(inorm, rank, shape[1], dtype, affine=affine)
        v = make_input(shape, dtype, rng, log_scale=(-0.5, 0.5))
        x = with_layout_nd(v, layout)
        leaf = x.detach().requires_grad_()
        dy = randn_in(shape, dtype, layout)
        what = f"{type(ours).__name__} {dtype} {layout} shape={shape} affine={affine}"
        y = ours(leaf)
        expect_layout(y, x, None, what)
        params = [ours.weight, ours.bias] if affine else []
        grads = torch.autograd.grad(y, [leaf] + params, dy)
        expect_layout(grads[0], x, None, f"{what} dx")
        ref, natural = reference_grads(v, ours.weight, ours.bias, dy)
        check_grads(grads, ref, grad_names(ours.weight), dtype, what, natural)
        assert torch.equal(x, v), f"{what}: the input was modified"


DY_CASES = [("channels_last", "contiguous"), ("contiguous", "channels_last"), ("channels_last", "padded"),
            ("cl_offset", "channels_last"), ("channels_last", "cl_offset")]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64], ids=str)
@pytest.mark.parametrize("x_layout,dy_layout", DY_CASES, ids=[f"x_{a}-dy_{b}" for a, b in DY_CASES])
@pytest.mark.parametrize("rank", RANKS)
def test_grad_output_in_another_layout(inorm, ops, rng, rank, x_layout, dy_layout, dtype):
    """grad_output in another layout than x: dx is right and in x's layout (ops.backward, the forced
    channel-last plans, autograd through the module); dy is left as it was."""
    shape = BACKWARD_SHAPES[rank][0]
    ours, _ = module_pair(inorm, rank, shape[1], dtype, affine=True)
    w, b = ours.weight.detach(), ours.bias.detach()
    v = make_input(shape, dtype, rng, log_scale=(-0.5, 0.5))
    x = with_layout_nd(v, x_layout)
    dy_v = torch.randn(shape, device="cuda").to(dtype)
    dy = with_layout_nd(dy_v, dy_layout)
    ref, natural = reference_grads(v, w, b, dy_v)
    _, stats = ops.forward(x, w, b, EPS)
    plans = [None] + (inorm.candidate_plans(x, True) if is_channels_last_dense(x) else [])
    for plan in plans:
        what = f"{dtype} x {x_layout}, dy {dy_layout}, shape={shape} plan={plan}"
        poison_allocator(v.numel() * v.element_size())
        if plan is None:
            dx, dw, db = ops.backward(dy, x, w, b, stats)
        else:
            dx, dw, db = inorm.backward_with_plan(dy, x, w, b, stats, plan)
        expect_layout(dx, x, plan, f"{what} dx")
        check_grads([dx, dw, db], ref, grad_names(w), dtype, what, natural)
        assert torch.equal(dy, dy_v) and outside_intact(dy), f"{what}: grad_output was modified"
    leaf = x.detach().requires_grad_()
    grads = torch.autograd.grad(ours(leaf), [leaf, ours.weight, ours.bias], dy)
    expect_layout(grads[0], x, None, f"module: x {x_layout}, dy {dy_layout} dx")
    check_grads(grads, ref, grad_names(w), dtype, f"module: x {x_layout}, dy {dy_layout}", natural)


# =========================================================================== fused epilogue

FUSED_SHAPES = [(2, 5, 37), (2, 7, 9, 11), (1, 3, 5, 6, 7), (2, 64, 7, 7)]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("residual", ["none", "channels_last", "contiguous"])
@pytest.mark.parametrize("act", ACTS)
def test_fused_channels_last(inorm, ops, rng, act, residual, dtype):
    """fused_forward / backward with an activation and a residual (channels-last or contiguous) on
    channels-last input, on the default plan and every listed channel-last plan: output and dx in x's
    layout; through autograd the residual's gradient is grad_output itself."""
    code = ACTS.index(act)
    slope = rng.choice(SLOPES) if act == "leaky_relu" else 0.0
    for shape in FUSED_SHAPES:
        x_layout = rng.choice(CL_LAYOUTS)
        v = make_input(shape, dtype, rng)
        x = with_layout_nd(v, x_layout)
        w, b = affine_params(shape[1], dtype) if rng.random() < 0.7 else (None, None)
        r = None
        if residual != "none":
            r = with_layout_nd(torch.randn(shape, device="cuda").mul(rng.uniform(0.3, 3)).to(dtype), residual)
        r0 = None if r is None else r.clone()
        what = f"{act}({slope}) {dtype} x {x_layout} residual {residual} affine={w is not None} shape={shape}"
        y_ref, z, _ = ref_fused_nd(v, w, b, r, act, slope)
        dy = kink_safe(randn_in(shape, dtype, rng.choice(["channels_last", "contiguous"])), z, act)
        names = grad_names(w, r)
        ref, natural = reference_grads(v, w, b, dy, r, act, slope)
        nbytes = v.numel() * v.element_size()
        for plan in [None] + inorm.candidate_plans(x):
            poison_allocator(nbytes)
            if plan is None:
                y, stats = ops.fused_forward(x, w, b, r, EPS, code, slope)
            else:
                y, stats = inorm.forward_with_plan(x, w, b, EPS, plan, residual=r, act=code, slope=slope)
            expect_layout(y, x, plan, f"{what} {plan}")
            assert torch.isfinite(y).all(), f"{what} {plan}: non-finite output"
            assert torch.equal(x, v) and (r is None or torch.equal(r, r0)), f"{what}: an input was modified"
            assert_close_to(y, y_ref, dtype, f"{what} {plan}")
            assert_stats_close(stats, v, EPS, f"{what} {plan}")
            if plan is None:
                default_stats = stats
        for plan in [None] + inorm.candidate_plans(x, True):
            poison_allocator(nbytes)
            if plan is None:
                dx, dw, db = ops.backward(dy, x, w, b, default_stats, code, slope)
            else:
                dx, dw, db = inorm.backward_with_plan(dy, x, w, b, default_stats, plan, act=code, slope=slope)
            expect_layout(dx, x, plan, f"{what} {plan} dx")
            got = [dx, dw, db][: 3 if w is not None else 1]
            check_grads(got, ref, names, dtype, f"{what} {plan} backward", natural)
        leaves = {k: t.detach().requires_grad_() for k, t in zip("xwbr", (x, w, b, r)) if t is not None}
        y2, _ = ops.fused_forward(leaves["x"], leaves.get("w"), leaves.get("b"), leaves.get("r"), EPS, code, slope)
        grads = torch.autograd.grad(y2, list(leaves.values()), dy)
        expect_layout(grads[0], x, None, f"{what} autograd dx")
        check_grads(grads, ref, names, dtype, f"{what} autograd", natural)
        if r is not None:
            assert torch.equal(grads[-1], dy), f"{what}: the residual's gradient is not grad_output"


@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
def test_instance_norm_act_channels_last(inorm, rng, training):
    """InstanceNormAct2d (unchanged API) on channels-last input, residual in either layout."""
    c, shape = 6, (2, 6, 9, 11)
    m = inorm.InstanceNormAct2d(c, affine=True, track_running_stats=True, activation="silu", device="cuda")
    with torch.no_grad():
        m.weight.copy_(torch.randn(c) * 2)
        m.bias.copy_(torch.randn(c))
        m.running_mean.copy_(torch.randn(c))
        m.running_var.copy_(torch.rand(c) + 0.5)
    m.train(training)
    for r_layout in ("channels_last", "contiguous"):
        v = make_input(shape, torch.float32, rng, log_scale=(-0.5, 0.5))
        x = with_layout_nd(v, "channels_last")
        r = with_layout_nd(torch.randn(shape, device="cuda"), r_layout)
        running = None if training else (m.running_mean.clone(), m.running_var.clone())
        with torch.no_grad():
            y = m(x, residual=r)
        expect_layout(y, x, None, f"residual {r_layout}")
        y_ref = ref_fused_nd(v, m.weight, m.bias, r, "silu", 0.0, m.eps, running)[0]
        assert_close_to(y, y_ref, torch.float32, f"training={training} residual {r_layout}")


# =========================================================================== eval mode and running statistics

EVAL_SHAPES = {1: (2, 6, 37), 2: (2, 5, 9, 11), 3: (1, 3, 4, 5, 6)}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("rank", RANKS)
def test_eval_running_stats_channels_last(inorm, rng, rank, dtype):
    """Eval with running statistics on channels-last input: output and gradients against float64 and
    nn.InstanceNorm{1,2,3}d, output and dx in x's layout."""
    shape = EVAL_SHAPES[rank]
    ours, eager = module_pair(inorm, rank, shape[1], dtype, affine=True, track_running_stats=True)
    ours.eval()
    eager.eval()
    v = make_input(shape, dtype, rng, log_scale=(-0.5, 0.5))
    x = with_layout_nd(v, "channels_last")
    dy = randn_in(shape, dtype, "channels_last")
    what = f"{type(ours).__name__} eval {dtype}"
    running = (ours.running_mean, ours.running_var)
    (y, grads), (y_eager, grads_eager) = ours_and_eager(ours, eager, x, dy)
    y_ref, _, leaves = ref_fused_nd(v, ours.weight, ours.bias, running=running)
    expect_layout(y, x, None, what)
    assert_close_to(y, y_ref, dtype, what)
    assert_matches_eager(y, y_eager, y_ref, dtype, what)
    expect_layout(grads[0], x, None, f"{what} dx")
    ref = torch.autograd.grad(y_ref, leaves, dy.double())
    check_grads(grads, ref, ["x", "weight", "bias"], dtype, what)
    for name, got, expected, want in zip(("x", "weight", "bias"), grads, grads_eager, ref):
        assert_matches_eager(got, expected, want, dtype, f"{what}: grad of {name}", name)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("act", ACTS)
def test_eval_ops_channels_last(ops, rng, act, dtype):
    """ops.eval_forward (with activation and residual) and ops.eval_backward on channels-last input of
    every rank: results in x's layout."""
    code = ACTS.index(act)
    slope = rng.choice(SLOPES) if act == "leaky_relu" else 0.0
    for shape in EVAL_SHAPES.values():
        c = shape[1]
        v = make_input(shape, dtype, rng, log_scale=(-0.5, 0.5))
        x = with_layout_nd(v, rng.choice(CL_LAYOUTS))
        rm, rv = torch.randn(c, device="cuda").to(dtype), (torch.rand(c, device="cuda") + 0.5).to(dtype)
        w, b = affine_params(c, dtype) if rng.random() < 0.7 else (None, None)
        r_layout = rng.choice(["none", "channels_last", "contiguous"])
        r = None if r_layout == "none" else randn_in(shape, dtype, r_layout)
        what = f"eval {act}({slope}) {dtype} shape={shape} residual {r_layout} affine={w is not None}"
        poison_allocator(v.numel() * v.element_size())
        y = ops.eval_forward(x, rm, rv, w, b, EPS, r, code, slope)
        y_ref, z, leaves = ref_fused_nd(v, w, b, r, act, slope, running=(rm, rv))
        expect_layout(y, x, None, what)
        assert torch.isfinite(y).all(), what
        assert_close_to(y, y_ref, dtype, what)
        dy = kink_safe(randn_in(shape, dtype, rng.choice(["channels_last", "contiguous"])), z, act)
        ref = torch.autograd.grad(y_ref, leaves, dy.double())
        poison_allocator(v.numel() * v.element_size())
        dx, dw, db = ops.eval_backward(dy, x, rm, rv, w, b, EPS, code, slope)
        expect_layout(dx, x, None, f"{what} dx")
        check_grads([dx, dw, db][: 3 if w is not None else 1], ref, grad_names(w, r), dtype, f"{what} eval_backward")


def random_shape(rng, rank, c):
    while True:
        spatial = tuple(rng.randint(1, 12) for _ in range(rank))
        if math.prod(spatial) > 1:
            return (rng.randint(1, 4), c) + spatial


@pytest.mark.parametrize("momentum", [0.1, None], ids=["m0.1", "mNone"])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("rank", RANKS)
def test_running_stats_like_pytorch(inorm, rng, rank, layout, momentum):
    """Three training steps then eval: outputs, running_mean / running_var / num_batches_tracked as
    nn.InstanceNorm{1,2,3}d's."""
    c = rng.choice([1, 3, 8, 17])
    ours, eager = module_pair(inorm, rank, c, affine=True, track_running_stats=True, momentum=momentum)
    with torch.no_grad():
        for step in range(3):
            shape = random_shape(rng, rank, c)
            v = make_input(shape, torch.float32, rng, log_scale=(-0.5, 0.5))
            x = with_layout_nd(v, layout)
            out = ours(x)
            what = f"step {step} {layout} shape={shape}"
            expect_layout(out, x, None, what)
            assert_matches_eager(out, eager(x), reference_nd(v, ours.weight, ours.bias), torch.float32, what)
        for name in ("running_mean", "running_var"):
            torch.testing.assert_close(getattr(ours, name), getattr(eager, name), rtol=1e-5, atol=1e-5, msg=name)
        assert torch.equal(ours.num_batches_tracked, eager.num_batches_tracked)
        ours.eval()
        eager.eval()
        x = with_layout_nd(make_input(random_shape(rng, rank, c), torch.float32, rng, log_scale=(-0.5, 0.5)), layout)
        out = ours(x)
        expect_layout(out, x, None, "eval")
        torch.testing.assert_close(out, eager(x), rtol=1e-5, atol=1e-5)


# =========================================================================== unbatched input and errors

UNBATCHED = {1: (5, 37), 2: (3, 7, 9), 3: (4, 3, 5, 6)}


@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
@pytest.mark.parametrize("rank", RANKS)
def test_unbatched_like_pytorch(inorm, rng, rank, layout):
    """(C, L) / (C, H, W) / (C, D, H, W) input, training then eval with running statistics: outputs,
    gradients and running statistics as PyTorch's."""
    shape = UNBATCHED[rank]
    ours, eager = module_pair(inorm, rank, shape[0], affine=True, track_running_stats=True)
    for training in (True, False):
        ours.train(training)
        eager.train(training)
        v = make_input((1,) + shape, torch.float32, rng, log_scale=(-0.5, 0.5))
        x = with_layout_nd(v, layout)[0]
        dy = torch.randn(shape, device="cuda")
        running = None if training else (ours.running_mean.clone(), ours.running_var.clone())
        (y, grads), (y_eager, grads_eager) = ours_and_eager(ours, eager, x, dy)
        what = f"{type(ours).__name__} unbatched {layout} training={training}"
        assert y.shape == shape, what
        y_ref = ref_fused_nd(v, ours.weight, ours.bias, running=running)[0][0]
        assert_close_to(y, y_ref, torch.float32, what)
        assert_matches_eager(y, y_eager, y_ref, torch.float32, what)
        for name, got, expected in zip(("x", "weight", "bias"), grads, grads_eager):
            torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4, msg=f"{what}: grad of {name}")
        for name in ("running_mean", "running_var"):
            torch.testing.assert_close(getattr(ours, name), getattr(eager, name), rtol=1e-5, atol=1e-5, msg=name)


def bad_nd_input(case, rank, c):
    spatial = (4, 5, 6)[:rank]
    return {
        "too_few_dims": lambda: torch.randn((c,) + spatial[1:], device="cuda"),
        "too_many_dims": lambda: torch.randn((2, c) + spatial + (3,), device="cuda"),
        "wrong_c_affine": lambda: torch.randn((2, c + 1) + spatial, device="cuda"),
        "wrong_c_affine_unbatched": lambda: torch.randn((c + 1,) + spatial, device="cuda"),
        "one_spatial_element": lambda: torch.randn((2, c) + (1,) * rank, device="cuda"),
        "int64": lambda: torch.randint(-5, 5, (2, c) + spatial, device="cuda"),
    }[case]()


BAD_ND = ["too_few_dims", "too_many_dims", "wrong_c_affine", "wrong_c_affine_unbatched", "one_spatial_element",
          "int64"]
SAME_MESSAGE = {"too_few_dims", "too_many_dims", "wrong_c_affine", "wrong_c_affine_unbatched"}


@pytest.mark.parametrize("case", BAD_ND)
@pytest.mark.parametrize("rank", RANKS)
def test_bad_inputs_raise_like_pytorch(inorm, rng, rank, case):
    """The exception type of nn.InstanceNorm{1,2,3}d (and its message for the rank and channel checks,
    e.g. "expected 2D or 3D input (got 4D input)"); the module still works afterwards."""
    c = rng.randint(2, 6)
    ours, eager = module_pair(inorm, rank, c, affine=True)
    x = bad_nd_input(case, rank, c)
    with torch.no_grad():
        with pytest.raises(Exception) as expected:
            eager(x)
        with pytest.raises(Exception) as got:
            ours(x)
    if case == "int64":  # NotImplementedError subclasses in some PyTorch versions
        assert isinstance(got.value, expected.type), f"{got.value!r} vs PyTorch's {expected.value!r}"
    else:
        assert got.type is expected.type, f"{got.value!r} vs PyTorch's {expected.value!r}"
    if case in SAME_MESSAGE:
        assert str(got.value) == str(expected.value)
    good = make_input((2, c) + (5, 4, 3)[:rank], torch.float32, rng)
    with torch.no_grad():
        out = ours(good)
    assert_close_to(out, reference_nd(good, ours.weight, ours.bias), torch.float32, "after the error")


@pytest.mark.parametrize("rank", [1, 3])
def test_wrong_channels_without_affine_warns(inorm, rng, rank):
    ours, _ = module_pair(inorm, rank, 4)
    x = make_input((2, 6) + (5, 4, 3)[:rank], torch.float32, rng)
    with pytest.warns(UserWarning), torch.no_grad():
        out = ours(x)
    assert_close_to(out, reference_nd(x), torch.float32, "wrong C, affine=False")


@pytest.mark.parametrize("affine,track", [(False, False), (True, False), (False, True), (True, True)],
                         ids=["plain", "affine", "running", "affine-running"])
@pytest.mark.parametrize("rank", [1, 3])
def test_state_dict_like_pytorch(inorm, rank, affine, track):
    """Subclass of nn.InstanceNorm{1,3}d with its positional constructor, attributes, parameters, buffers
    and state_dict keys; state dicts load both ways (strict)."""
    ours_cls, eager_cls = module_classes(inorm, rank)
    assert issubclass(ours_cls, eager_cls)
    args = (6, 1e-3, 0.2, affine, track, "cuda", torch.float32)
    ours, eager = ours_cls(*args), eager_cls(*args)
    for attr in ("num_features", "eps", "momentum", "affine", "track_running_stats"):
        assert getattr(ours, attr) == getattr(eager, attr), attr
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in eager.named_parameters()]
    assert [n for n, _ in ours.named_buffers()] == [n for n, _ in eager.named_buffers()]
    assert list(ours.state_dict()) == list(eager.state_dict())
    for src, dst in ((eager, ours), (ours, eager)):
        with torch.no_grad():
            for tensor in src.state_dict().values():
                if tensor.is_floating_point():
                    tensor.copy_(torch.rand_like(tensor) + 0.5)
        dst.load_state_dict(src.state_dict())
        for key, value in src.state_dict().items():
            assert torch.equal(dst.state_dict()[key], value), key


# =========================================================================== torch.compile, CUDA graphs, opcheck

@pytest.mark.parametrize("case", ["2d", "2d_autograd", "3d"])
def test_compile_channels_last(inorm, rng, fresh_dynamo, case):
    """torch.compile(fullgraph=True, dynamic=False) of ModelNew on channels_last / InstanceNorm3d on
    channels_last_3d input: the output equals eager ours and keeps the channels-last layout."""
    rank, shape = (3, (2, 4, 5, 6, 7)) if case == "3d" else (2, (2, 8, 17, 19))
    fmt = torch.channels_last_3d if rank == 3 else torch.channels_last
    ours, _ = module_pair(inorm, rank, shape[1], affine=True)
    v = make_input(shape, torch.float32, rng, log_scale=(-0.5, 0.5))
    x = v.contiguous(memory_format=fmt)
    compiled = torch.compile(ours, fullgraph=True, dynamic=False)
    if case == "2d_autograd":
        dy = torch.randn_like(x)
        results = []
        for model in (ours, compiled):
            leaf = x.detach().requires_grad_()
            y = model(leaf)
            results.append((y.detach(), torch.autograd.grad(y, [leaf, ours.weight, ours.bias], dy)))
        (y_eager, g_eager), (y, g) = results
        for name, got, want in zip(("x", "weight", "bias"), g, g_eager):
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4, msg=f"grad of {name}")
    else:
        with torch.no_grad():
            y_eager, y = ours(x), compiled(x)
    expect_layout(y_eager, x, None, "eager")
    expect_layout(y, x, None, "compiled")
    assert y.is_contiguous(memory_format=fmt)
    torch.testing.assert_close(y, y_eager, rtol=1e-5, atol=1e-5)
    assert_close_to(y, reference_nd(v, ours.weight, ours.bias), torch.float32, "compiled")


@pytest.mark.parametrize("rank", RANKS)
def test_cuda_graph_channels_last(inorm, rng, rank):
    """Capture the module on channels-last input, replay with new data copied into the static input."""
    shape = {1: (2, 6, 77), 2: (2, 8, 17, 19), 3: (2, 4, 5, 6, 7)}[rank]
    model, _ = module_pair(inorm, rank, shape[1], affine=True)
    x = with_layout_nd(make_input(shape, torch.float32, rng), "channels_last")
    graph, y = capture_no_grad(model, x)
    expect_layout(y, x, None, "captured")
    for replay in range(2):
        x.copy_(make_input(shape, torch.float32, rng))
        graph.replay()
        torch.cuda.synchronize()
        assert_close_to(y, reference_nd(x, model.weight, model.bias), torch.float32, f"replay {replay}")


@pytest.mark.parametrize("rank", RANKS)
def test_opcheck_channels_last(ops, rank):
    """Schema, autograd registration and fake kernels on channels-last input: the fake kernels' output
    strides must be the real ones (what torch.compile plans its graph with)."""
    shape = {1: (2, 3, 10), 2: (2, 3, 5, 6), 3: (2, 3, 2, 3, 4)}[rank]
    utils = ("test_schema", "test_autograd_registration", "test_faketensor")
    x = with_layout_nd(torch.randn(shape, device="cuda"), "channels_last").requires_grad_()
    w, b = (torch.randn(3, device="cuda", requires_grad=True) for _ in range(2))
    r = with_layout_nd(torch.randn(shape, device="cuda"), "channels_last")
    rm, rv = torch.randn(3, device="cuda"), torch.rand(3, device="cuda") + 0.5
    torch.library.opcheck(ops.forward.default, (x, w, b, EPS), test_utils=utils)
    torch.library.opcheck(ops.fused_forward.default, (x, w, b, r, EPS, 3, 0.0), test_utils=utils)
    torch.library.opcheck(ops.fused_forward.default, (x, None, None, r.contiguous(), EPS, 1, 0.0), test_utils=utils)
    torch.library.opcheck(ops.eval_forward.default, (x, rm, rv, w, b, EPS, r, 4, 0.0), test_utils=utils)
    xd, wd, bd = x.detach(), w.detach(), b.detach()
    _, stats = ops.forward(xd, wd, bd, EPS)
    for dy in (torch.randn_like(xd), torch.randn(shape, device="cuda")):
        torch.library.opcheck(ops.backward.default, (dy, xd, wd, bd, stats, 0, 0.0), test_utils=utils)
        torch.library.opcheck(ops.eval_backward.default, (dy, xd, rm, rv, wd, bd, EPS, 2, 0.1), test_utils=utils)
