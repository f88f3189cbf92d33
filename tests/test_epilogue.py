"""The fused epilogue: y = act(x_hat * weight + bias) (+ residual), its backward, InstanceNormAct2d,
fuse_activations and the torch.compile fusion pass.

Everything is checked against a float64 reference (the norm, then the activation with exact formulas,
then + residual; gradients by float64 autograd) on fresh random inputs (seeds in conftest.py). Where
relu / leaky_relu have a kink, grad_output is zeroed at elements whose float64 pre-activation lies
within rounding of 0 (but not exactly on it): there the float32 pre-activation may fall on either
side. Exact zeros are tested on purpose by test_kink_at_exact_zero.

GPU tests carry `requires_cuda`; the module and fuse_activations tests also run on CPU (plain ops).
"""

import copy
import math
import re

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from conftest import (ACT_REF, near_kink, as_plan, assert_close_to, assert_matches_eager, assert_stats_close, check_grads,
                      DTYPES, expect_layout, has_clusters, LAYOUTS, make_input, plan_capacity, poison_allocator, reference,
                      natural_dx, param_terms, REGIMES, rel_err, skip_unsupported_regime, split_hw, whole_vectors,
                      with_layout)

CUDA = pytest.mark.requires_cuda
ACTS = ("identity", "relu", "leaky_relu", "silu", "gelu", "gelu_tanh")  # index == the ops' act code
SLOPES = [0.0, 0.01, 0.2, 1.0, -0.3]
EPS = 1e-5
LOW = (torch.float16, torch.bfloat16)
RESIDUAL_LAYOUTS = ["contiguous", "channels_last", "offset", "sliced"]
DEVICES = ["cpu", pytest.param("cuda", marks=CUDA)]



def eager_act(act, slope=0.01):
    return {"identity": nn.Identity, "relu": nn.ReLU, "leaky_relu": lambda: nn.LeakyReLU(slope), "silu": nn.SiLU,
            "gelu": nn.GELU, "gelu_tanh": lambda: nn.GELU(approximate="tanh")}[act]()


def ref_fused(x, w, b, r, act, slope, eps=EPS, running=None):
    """float64 act(norm(x) * w + b) + r, the pre-activation z (in the graph), the leaves [x, w?, b?, r?].
    `running` = (running_mean, running_var): eval mode's statistics instead of the instance's."""
    xd, wd, bd, rd = (None if t is None else t.detach().double().requires_grad_() for t in (x, w, b, r))
    if running is None:
        z = reference(xd, wd, bd, eps)
    else:
        rm, rv = (t.detach().double().view(-1, 1, 1) for t in running)
        z = (xd - rm) * torch.rsqrt(rv + eps)
        z = z if wd is None else z * wd.view(-1, 1, 1)
        z = z if bd is None else z + bd.view(-1, 1, 1)
    y = ACT_REF[act](z, slope)
    y = y if rd is None else y + rd
    return y, z, [t for t in (xd, wd, bd, rd) if t is not None]


def ref_xhat(x, eps, running=None):
    """float64 normalized x: by the instance's statistics, or the running ones when `running` is given
    (not as (z - b) / w, which a zero weight would break)."""
    xd = x.detach().double()
    if running is None:
        mean = xd.mean(dim=(-2, -1), keepdim=True)
        return (xd - mean) * torch.rsqrt((xd - mean).square().mean(dim=(-2, -1), keepdim=True) + eps)
    rm, rv = (t.detach().double().view(-1, 1, 1) for t in running)
    return (xd - rm) * torch.rsqrt(rv + eps)


def module_param_terms(x, z, y_ref, dy, running, eps):
    """param_terms of ref_fused's graph (kept for the caller's own backward): dz from y_ref back to z."""
    dz, = torch.autograd.grad(y_ref, z, dy.double(), retain_graph=True)
    return param_terms(dz, ref_xhat(x, eps, running))


def kink_safe(dy, z, act):
    """dy zeroed where relu's / leaky_relu's kink is not fixed by the input (conftest.near_kink)."""
    if act not in ("relu", "leaky_relu"):
        return dy
    return dy.masked_fill(near_kink(z).to(dy.device), 0)


def grad_names(w, r):
    return ["x"] + (["weight", "bias"] if w is not None else []) + (["residual"] if r is not None else [])


def leaf_inputs(x, w, b, r):
    """Detached leaves requiring grad, by name (x, w, b, r), the absent ones left out."""
    return {k: t.detach().requires_grad_() for k, t in zip("xwbr", (x, w, b, r)) if t is not None}


def affine_params(c, dtype, device="cuda"):
    return (torch.randn(c, device=device) * 2).to(dtype), torch.randn(c, device=device).to(dtype)


def epilogue_hw(regime, dtype, rng):
    """An H*W filling the regime's plan 50..100% in forward and backward alike; odd unless stream."""
    plan = REGIMES[regime]
    if plan is None or as_plan(plan).regime == "multi_cta":
        return rng.randint(150, 35000) * 2 + 1
    if as_plan(plan).regime == "flat":  # many tiny instances to a CTA, or a few large ones
        return rng.choice([rng.randint(2, 100), rng.randint(101, 4096)])  # eager refuses 1x1 in training
    top = min(cap for cap in (plan_capacity(plan, dtype), plan_capacity(plan, dtype, True)) if cap > 0)
    hw = rng.randint(top // 2 + 1, top)
    if whole_vectors(plan):
        vec = 16 // dtype.itemsize
        return max(vec, hw // vec * vec)
    return hw if hw % 2 else hw - 1


def fused_call(inorm, ops, x, w, b, r, act, slope, plan, eps=EPS):
    if plan is None:
        return ops.fused_forward(x, w, b, r, eps, ACTS.index(act), slope)
    return inorm.forward_with_plan(x, w, b, eps, as_plan(plan), residual=r, act=ACTS.index(act), slope=slope)


def backward_call(inorm, ops, dy, x, w, b, stats, act, slope, plan):
    if plan is None:
        return ops.backward(dy, x, w, b, stats, ACTS.index(act), slope)
    return inorm.backward_with_plan(dy, x, w, b, stats, as_plan(plan), act=ACTS.index(act), slope=slope)


@CUDA
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
def test_fused_wide_stream_forward(inorm, ops, rng, dtype):
    """The forward's wide stream plans (K=16; forward only, so check_fused, which runs the backward on
    the same plan, cannot take them) with a random activation and slope, affine, and a residual in a
    random layout, against the float64 reference: instances filling a CTA's slice 50-100 %, at every
    cluster size, one stage and two."""
    if not has_clusters():
        pytest.skip("the stream kernel needs sm_90+")
    vec = 16 // dtype.itemsize
    for cluster in (2, 4, 8, 16):  # 4 and 8: the ones wide_forward picks
        for stages in (1, 2):
            plan = inorm.Plan.stream(cluster, stages, 16)
            top = plan_capacity(plan, dtype)
            assert top > 0, f"{plan} refused"
            hw = max(vec, rng.randint(top // 2 + 1, top) // vec * vec)
            shape = (rng.randint(1, 3), rng.randint(1, 5)) + split_hw(hw, rng)
            act, slope = rng.choice(ACTS), rng.choice(SLOPES)
            what = f"plan={plan} {dtype} shape={shape} act={act} slope={slope}"
            x = with_layout(make_input(shape, dtype, rng), rng.choice(LAYOUTS))
            w, b = affine_params(shape[1], dtype)
            r = with_layout(torch.randn(shape, device="cuda").mul(rng.uniform(0.3, 3)).to(dtype),
                            rng.choice(RESIDUAL_LAYOUTS))
            poison_allocator(x.numel() * x.element_size())
            y, stats = fused_call(inorm, ops, x, w, b, r, act, slope, plan)
            assert y.shape == x.shape and y.dtype == dtype, what
            expect_layout(y, x, plan, what)
            assert torch.isfinite(y).all(), f"{what}: non-finite output for finite input"
            y_ref, _, _ = ref_fused(x, w, b, r, act, slope)

            def eager_forward():
                return eager_act(act, slope)(F.instance_norm(x, weight=w, bias=b, eps=EPS)) + r

            assert_close_to(y, y_ref, dtype, what, eager=eager_forward)
            assert_stats_close(stats, x, EPS, what)


def check_fused(inorm, ops, rng, shape, dtype, act, slope, residual, affine, plan, what, layout=None):
    """Forward (y, stats) and backward (dx, dweight, dbias) of one plan against the float64 reference; on the
    default plan also autograd through fused_forward, whose residual gradient is grad_output itself. x's
    layout is `layout`, or one of LAYOUTS at random."""
    x = with_layout(make_input(shape, dtype, rng), layout or rng.choice(LAYOUTS))
    w, b = affine_params(shape[1], dtype) if affine else (None, None)
    r = with_layout(torch.randn(shape, device="cuda").mul(rng.uniform(0.3, 3)).to(dtype),
                    rng.choice(RESIDUAL_LAYOUTS)) if residual else None
    x0, r0 = x.clone(), (r.clone() if residual else None)
    nbytes = x.numel() * x.element_size()
    poison_allocator(nbytes)
    y, stats = fused_call(inorm, ops, x, w, b, r, act, slope, plan)
    assert y.shape == x.shape and y.dtype == dtype, what
    expect_layout(y, x, plan, what)  # x's channels-last layout unless an NCHW plan is forced; else contiguous
    assert torch.isfinite(y).all(), f"{what}: non-finite output for finite input"
    assert torch.equal(x, x0) and (r is None or torch.equal(r, r0)), f"{what}: an input was modified"
    y_ref, z, leaves = ref_fused(x, w, b, r, act, slope)

    def eager_forward():  # PyTorch's chain in `dtype`: the bar on ill-conditioned (H*W = 2) instances
        out = eager_act(act, slope)(F.instance_norm(x, weight=w, bias=b, eps=EPS))
        return out if r is None else out + r

    assert_close_to(y, y_ref, dtype, what, eager=eager_forward)
    assert_stats_close(stats, x, EPS, what)
    if dtype in LOW:  # one rounding of the float32 result: at least as accurate as eager's chain
        eager = eager_forward()
        ours, theirs = rel_err(y, y_ref), rel_err(eager, y_ref)
        assert ours <= 1.5 * theirs + 1e-6, f"{what}: error {ours:.3g} vs eager's {theirs:.3g}"

    dy = kink_safe(torch.randn(shape, device="cuda").to(dtype), z, act)
    names = grad_names(w, r)
    *ref, g_z = torch.autograd.grad(y_ref, leaves + [z], dy.double())
    natural = natural_dx(x, w, g_z)
    poison_allocator(nbytes)
    dx, dw, db = backward_call(inorm, ops, dy, x, w, b, stats, act, slope, plan)
    expect_layout(dx, x, plan, f"{what} dx")
    if not affine:
        assert dw.numel() == 0 and db.numel() == 0, f"{what}: dweight/dbias without affine"
    def eager_grads():  # PyTorch's own chain in `dtype`: the accuracy bar on ill-conditioned instances
        leaves = leaf_inputs(x, w, b, r)
        ye = eager_act(act, slope)(F.instance_norm(leaves["x"], weight=leaves.get("w"), bias=leaves.get("b"),
                                                   eps=EPS))
        return torch.autograd.grad(ye if r is None else ye + leaves["r"], list(leaves.values()), dy)

    # dweight / dbias relative to their terms: a gelu_tanh float32 dweight of 0.341 summed 15591 terms
    # (3, 1, 1, 5197) and came out 1.38e-4 off relative to itself (GPU run, seed 3861849668092909389).
    terms = param_terms(g_z, ref_xhat(x, EPS))
    check_grads([dx, dw, db][: 3 if affine else 1], ref, names, dtype, f"{what} backward", natural, eager_grads,
                terms)
    if plan is None:
        inputs = leaf_inputs(x, w, b, r)
        y2, _ = ops.fused_forward(inputs["x"], inputs.get("w"), inputs.get("b"), inputs.get("r"), EPS,
                                  ACTS.index(act), slope)
        grads = torch.autograd.grad(y2, list(inputs.values()), dy)
        check_grads(grads, ref, names, dtype, f"{what} autograd", natural, eager_grads, terms)
        if residual:
            assert torch.equal(grads[-1], dy), f"{what}: the residual's gradient is not grad_output"


# =========================================================================== 1. every activation x residual x regime x dtype

VARIANTS = {"plain": (False, True), "residual": (True, True), "residual_no_affine": (True, False)}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("regime", list(REGIMES))
@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("act", ACTS)
@CUDA
def test_fused_every_regime(inorm, ops, rng, act, variant, regime, dtype):
    skip_unsupported_regime(regime, dtype)
    residual, affine = VARIANTS[variant]
    slope = rng.choice(SLOPES) if act == "leaky_relu" else 0.0
    n = rng.randint(1, 3)
    shape = (n, rng.randint(1, max(1, 6 // n))) + split_hw(epilogue_hw(regime, dtype, rng), rng)
    check_fused(inorm, ops, rng, shape, dtype, act, slope, residual, affine, REGIMES[regime],
                f"{act}({slope}) {variant} {regime} {dtype} shape={shape}")


# The onchip kernel's whole-group path (H*W = K * G * vec, no cluster: no bounds, equal-count merges, 16-bit
# epilogues mapped two vectors at a time) with each activation and a residual, forward and backward; N*C
# leaves the last CTA partly idle where a CTA holds several groups (G < 128 runs 256-thread CTAs).
WHOLE_GROUP_EPILOGUE_PLANS = [(torch.float32, 8, 32, (3, 5)), (torch.float32, 8, 512, (1, 3)),
                              (torch.bfloat16, 4, 32, (3, 5)), (torch.bfloat16, 8, 64, (1, 7)),
                              (torch.bfloat16, 8, 512, (1, 2)), (torch.float16, 2, 256, (2, 3)),
                              # the register path: fp16 K=4 (its forward spills most), fp32 K=4's backward
                              (torch.float16, 4, 32, (3, 5)), (torch.float32, 4, 64, (1, 7))]


@pytest.mark.parametrize("case", WHOLE_GROUP_EPILOGUE_PLANS, ids=lambda c: f"{c[0]}-K{c[1]}-G{c[2]}")
@pytest.mark.parametrize("act", ACTS)
@CUDA
def test_fused_whole_group(inorm, ops, rng, act, case):
    dtype, k, threads, (n, c) = case
    plan = ("onchip", k, threads, 1, 0)
    hw = k * threads * (16 // dtype.itemsize)
    if plan_capacity(plan, dtype) == 0 or plan_capacity(plan, dtype, True) == 0:
        pytest.skip(f"{as_plan(plan)} cannot run on this device")
    slope = rng.choice(SLOPES) if act == "leaky_relu" else 0.0
    for residual, affine in ((True, True), (False, rng.random() < 0.5)):
        shape = (n, c) + split_hw(hw, rng)
        probe = torch.empty(shape, dtype=dtype, device="cuda")
        for backward in (False, True):  # whole vectors from a 16-byte aligned start: the plan takes them
            assert inorm.plan_refusal(probe, as_plan(plan), backward) == "", f"{as_plan(plan)} {shape} {backward}"
        check_fused(inorm, ops, rng, shape, dtype, act, slope, residual, affine, plan,
                    f"{act}({slope}) residual={residual} affine={affine} {as_plan(plan)} {dtype} shape={shape}")


ODD_HW = [(1, 2), (2, 1), (3, 1), (1, 5), (7, 7), (1, 31), (3, 11), (17, 241), (127, 129), (1, 65537)]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@CUDA
def test_fused_odd_sizes(inorm, ops, rng, dtype):
    """Default plan on H*W of odd sizes (not whole vectors; instances not 16-byte aligned)."""
    for hw in ODD_HW:
        for act in ACTS:
            shape = (rng.randint(1, 3), rng.randint(1, 5)) + hw
            slope = rng.choice(SLOPES) if act == "leaky_relu" else 0.0
            residual, affine = rng.random() < 0.5, rng.random() < 0.7
            check_fused(inorm, ops, rng, shape, dtype, act, slope, residual, affine, None,
                        f"{act}({slope}) residual={residual} affine={affine} {dtype} shape={shape}")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
@CUDA
def test_fused_rows_many_ctas(inorm, ops, rng, dtype):
    """The flat forward's register rows with an epilogue past one CTA (every rows G: H*W 3 to 100, G 1 to
    16; accesses of 1, 2 and 4 elements; the default plan's 128-thread CTAs of 128 / G instances for G 2 to 16, a partial last CTA): a
    random activation, residual and affine on a few hundred to ~2000 instances of contiguous input (a
    channels-last one takes the channels-last plans), forward and backward against float64. (float64 never
    takes the rows.)"""
    for hw in (3, 4, 6, 10, 12, 16, 25, 36, 49, 100):  # accesses of 1, 4, 2 elements (rows_width)
        act = rng.choice(ACTS)
        slope = rng.choice(SLOPES) if act == "leaky_relu" else 0.0
        residual, affine = rng.random() < 0.5, rng.random() < 0.7
        shape = (rng.randint(1, 3), rng.randint(200, 700)) + split_hw(hw, rng)
        check_fused(inorm, ops, rng, shape, dtype, act, slope, residual, affine, None,
                    f"{act}({slope}) residual={residual} affine={affine} {dtype} shape={shape}", layout="contiguous")


@CUDA
def test_residual_grad_is_grad_output_no_copy(ops, rng):
    x = make_input((2, 3, 9, 11), torch.float32, rng).requires_grad_()
    r = torch.randn(2, 3, 9, 11, device="cuda", requires_grad=True)
    y, _ = ops.fused_forward(x, None, None, r, EPS, ACTS.index("silu"), 0.0)
    dy = torch.randn_like(y)
    _, gr = torch.autograd.grad(y, [x, r], dy)
    assert torch.equal(gr, dy) and gr.data_ptr() == dy.data_ptr()


@pytest.mark.parametrize("eval_mode", [False, True], ids=["train", "eval"])
@CUDA
def test_only_the_residual_wants_a_gradient(inorm, ops, rng, eval_mode):
    """A frozen norm with a trainable skip: the residual's gradient is dy and nothing else is
    computed (x, weight and bias get none)."""
    x = make_input((2, 3, 9, 11), torch.float32, rng)
    w, b = affine_params(3, torch.float32)
    r = torch.randn_like(x, requires_grad=True)
    if eval_mode:
        rm, rv = torch.zeros(3, device="cuda"), torch.ones(3, device="cuda")
        y = ops.eval_forward(x, rm, rv, w, b, EPS, r, ACTS.index("gelu"), 0.0)
    else:
        y, _ = ops.fused_forward(x, w, b, r, EPS, ACTS.index("gelu"), 0.0)
    dy = torch.randn_like(y)
    (gr,) = torch.autograd.grad(y, [r], dy)
    assert torch.equal(gr, dy)


# =========================================================================== 2. the kink at exactly z == 0

@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("regime", list(REGIMES))
@pytest.mark.parametrize("act,slope", [("relu", 0.0)] + [("leaky_relu", s) for s in SLOPES])
@CUDA
def test_kink_at_exact_zero(inorm, ops, rng, act, slope, regime, dtype):
    """z == 0 exactly: channel 0 has weight = bias = 0, instance (0, 1) is constant with bias[1] = 0 (a
    constant instance normalizes to exactly 0). PyTorch's convention: relu'(0) = 0, leaky_relu'(0) = slope."""
    skip_unsupported_regime(regime, dtype)
    plan = REGIMES[regime]
    shape = (2, 3) + split_hw(epilogue_hw(regime, dtype, rng), rng)
    x = make_input(shape, dtype, rng)
    x[0, 1] = rng.choice([0.0, 1.0, -2.5, 3.75])
    w, b = affine_params(3, dtype)
    w[0], b[0], b[1] = 0, 0, 0
    y, stats = fused_call(inorm, ops, x, w, b, None, act, slope, plan)
    assert torch.equal(y[:, 0], torch.zeros_like(y[:, 0])) and torch.equal(y[0, 1], torch.zeros_like(y[0, 1]))
    y_ref, z, leaves = ref_fused(x, w, b, None, act, slope)
    assert_close_to(y, y_ref, dtype, f"{act}({slope}) {regime} forward")
    dy = kink_safe(torch.randn(shape, device="cuda").to(dtype), z, act)
    dx, dw, db = backward_call(inorm, ops, dy, x, w, b, stats, act, slope, plan)
    *ref, g_z = torch.autograd.grad(y_ref, leaves + [z], dy.double())
    check_grads([dx, dw, db], ref, ["x", "weight", "bias"], dtype, f"{act}({slope}) {regime} {dtype}",
                natural_dx(x, w, g_z))
    if act == "relu":
        assert dw[0] == 0 and db[0] == 0 and torch.equal(dx[0, 1], torch.zeros_like(dx[0, 1]))
    elif slope != 0:
        assert db[0] != 0, "leaky_relu'(0) must be the slope"


# =========================================================================== 3. eval mode (running statistics)

@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("affine,residual", [(True, True), (True, False), (False, True)],
                         ids=["affine-residual", "affine", "plain-residual"])
@pytest.mark.parametrize("act", ACTS)
@CUDA
def test_eval_ops(ops, rng, act, affine, residual, dtype):
    c = rng.randint(1, 6)
    shape = (rng.randint(1, 3), c) + split_hw(rng.choice([7, 301, 4097, 70001]), rng)
    slope = rng.choice(SLOPES) if act == "leaky_relu" else 0.0
    code, what = ACTS.index(act), f"eval {act}({slope}) {dtype} shape={shape}"
    x = make_input(shape, dtype, rng, log_scale=(-0.5, 0.5))
    rm, rv = torch.randn(c, device="cuda").to(dtype), (torch.rand(c, device="cuda") + 0.5).to(dtype)
    w, b = affine_params(c, dtype) if affine else (None, None)
    r = torch.randn(shape, device="cuda").to(dtype) if residual else None
    poison_allocator(x.numel() * x.element_size())
    y = ops.eval_forward(x, rm, rv, w, b, EPS, r, code, slope)
    assert torch.isfinite(y).all(), what
    y_ref, z, leaves = ref_fused(x, w, b, r, act, slope, running=(rm, rv))

    def eager():  # gelu's tail, 0.5 z (1 + erf(z / sqrt 2)), cancels in float32 for eager as for us:
        # an output mostly in the tail (a (2, 1, 1, 70001) float32 case, bias far below 0) misses TOL
        ye = eager_act(act, slope)(F.instance_norm(x, rm, rv, w, b, use_input_stats=False, eps=EPS))
        return ye if r is None else ye + r

    assert_close_to(y, y_ref, dtype, what, eager)
    dy = kink_safe(torch.randn(shape, device="cuda").to(dtype), z, act)
    names, ref = grad_names(w, r), torch.autograd.grad(y_ref, leaves, dy.double())
    dx, dw, db = ops.eval_backward(dy, x, rm, rv, w, b, EPS, code, slope)
    check_grads([dx, dw, db][: 3 if affine else 1], ref, names, dtype, f"{what} eval_backward")
    inputs = leaf_inputs(x, w, b, r)
    y2 = ops.eval_forward(inputs["x"], rm, rv, inputs.get("w"), inputs.get("b"), EPS, inputs.get("r"), code, slope)
    grads = torch.autograd.grad(y2, list(inputs.values()), dy)
    check_grads(grads, ref, names, dtype, f"{what} autograd")
    if residual:
        assert torch.equal(grads[-1], dy), f"{what}: the residual's gradient is not grad_output"


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@CUDA
def test_eval_ops_tiny_instances(ops, rng, dtype):
    """Eval mode on instances the flat kernel's element map serves with running statistics (up to
    kFlatMaxSize = 4096 elements when there is an instance per SM; 4097 is multi_cta's, and so are
    few instances above H*W = 64): many instances over several CTAs, sizes that start instances
    inside a 16-byte vector, every activation, with and without affine parameters and a residual;
    poisoned output."""
    sizes = [(hw, rng.randint(20, 90), rng.randint(1, 40)) for hw in (1, 2, 7, 49, 63, 64)]
    for hw in (65, 255, 1023, 1024, 4095, 4096, 4097):  # at least 144 instances (132 SMs), then few
        sizes += [(hw, rng.randint(6, 12), rng.randint(24, 40)), (hw, rng.randint(1, 3), rng.randint(1, 8))]
    for hw, n, c in sizes:
        shape = (n, c) + split_hw(hw, rng)
        act = rng.choice(ACTS)
        slope = rng.choice(SLOPES) if act == "leaky_relu" else 0.0
        affine, residual = rng.random() < 0.5, rng.random() < 0.5
        what = f"eval {act}({slope}) {dtype} shape={shape} affine={affine} residual={residual}"
        x = make_input(shape, dtype, rng, log_scale=(-0.5, 0.5))
        rm, rv = torch.randn(c, device="cuda").to(dtype), (torch.rand(c, device="cuda") + 0.5).to(dtype)
        w, b = affine_params(c, dtype) if affine else (None, None)
        r = torch.randn(shape, device="cuda").to(dtype) if residual else None
        poison_allocator(x.numel() * x.element_size())
        y = ops.eval_forward(x, rm, rv, w, b, EPS, r, ACTS.index(act), slope)
        assert torch.isfinite(y).all(), what
        y_ref, _, _ = ref_fused(x, w, b, r, act, slope, running=(rm, rv))

        def eager():
            ye = eager_act(act, slope)(F.instance_norm(x, rm, rv, w, b, use_input_stats=False, eps=EPS))
            return ye if r is None else ye + r

        assert_close_to(y, y_ref, dtype, what, eager)


# =========================================================================== 4. InstanceNormAct2d

MODULE_CASES = [pytest.param("cuda", torch.float32, marks=CUDA, id="cuda-float32"),
                pytest.param("cuda", torch.bfloat16, marks=CUDA, id="cuda-bfloat16"),
                pytest.param("cpu", torch.float32, id="cpu-float32"),
                pytest.param("cpu", torch.float64, id="cpu-float64")]


def randomize(module):
    with torch.no_grad():
        for name, tensor in module.state_dict().items():
            if tensor.is_floating_point():
                tensor.copy_(torch.rand_like(tensor) + 0.5 if name.endswith("running_var") else torch.randn_like(tensor))
    return module


def test_activation_names(inorm):
    assert tuple(inorm.ACTIVATIONS) == ACTS


@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("act", ACTS)
@pytest.mark.parametrize("device,dtype", MODULE_CASES)
def test_module_like_eager(inorm, rng, device, dtype, act, training):
    """InstanceNormAct2d vs nn.Sequential(nn.InstanceNorm2d, activation) [+ residual]: outputs, gradients of
    x / weight / bias / residual, running statistics after three steps."""
    c, slope = rng.randint(1, 6), (0.2 if act == "leaky_relu" else 0.01)
    kwargs = dict(affine=True, track_running_stats=True, device=device, dtype=dtype)
    ours = randomize(inorm.InstanceNormAct2d(c, activation=act, negative_slope=slope, **kwargs))
    norm = nn.InstanceNorm2d(c, **kwargs)
    norm.load_state_dict(ours.state_dict())
    eager = nn.Sequential(norm, eager_act(act, slope)).train(training)
    ours.train(training)
    for step in range(3):
        shape = (rng.randint(1, 4), c, rng.randint(2, 40), rng.randint(2, 40))
        what = f"{act} {device} {dtype} training={training} step {step} shape={shape}"
        x = make_input(shape, dtype, rng, log_scale=(-0.5, 0.5), device=device)
        r = None if step == 0 else torch.randn(shape, device=device).to(dtype)
        running = None if training else (ours.running_mean.clone(), ours.running_var.clone())
        y_ref, z, leaves = ref_fused(x, ours.weight, ours.bias, r, act, slope, ours.eps, running)
        dy = kink_safe(torch.randn(shape, device=device).to(dtype), z, act)
        results = []
        for model in (ours, norm):
            xi, ri = x.clone().requires_grad_(), (None if r is None else r.clone().requires_grad_())
            y = ours(xi, residual=ri) if model is ours else eager(xi) + (0 if r is None else ri)
            grads = torch.autograd.grad(y, [xi, model.weight, model.bias] + ([ri] if r is not None else []), dy)
            results.append((y, grads))
        (y, grads), (y_eager, grads_eager) = results
        terms = module_param_terms(x, z, y_ref, dy, running, ours.eps)
        ref = torch.autograd.grad(y_ref, leaves, dy.double())
        assert y.dtype == dtype and y.device == x.device, what
        # Random running statistics and affine can put a whole instance deep in gelu's or silu's negative
        # tail, where the output's relative error is about z^2 times z's (one float32 (1, 1, 38, 32) gelu
        # eval instance, outputs printed as -0.: 3.7e-5 against 1e-5, max abs 1.1e-7, s39/call1; its dx
        # 1.7e-5, call2): bounds then widen to twice eager's, for y here and for the gradients in check_grads.
        assert_close_to(y, y_ref, dtype, what, eager=lambda: y_eager)
        assert_matches_eager(y, y_eager, y_ref, dtype, what)
        names = grad_names(ours.weight, r)
        check_grads(grads, ref, names, dtype, what, eager=lambda: grads_eager, terms=terms)
        for name, got, expected, want in zip(names, grads, grads_eager, ref):
            assert_matches_eager(got, expected, want, dtype, f"{what}: grad of {name}", name, terms)
    tol = 2e-2 if dtype == torch.bfloat16 else 1e-5
    for name in ("running_mean", "running_var"):
        torch.testing.assert_close(getattr(ours, name), getattr(norm, name), rtol=tol, atol=tol, msg=name)
    assert torch.equal(ours.num_batches_tracked, norm.num_batches_tracked)


@pytest.mark.parametrize("device", DEVICES)
def test_module_unbatched(inorm, rng, device):
    m = randomize(inorm.InstanceNormAct2d(3, affine=True, activation="gelu", device=device))
    x = make_input((1, 3, 7, 9), torch.float32, rng, device=device)
    r = torch.randn(1, 3, 7, 9, device=device)
    for res in (None, r):
        y3 = m(x[0], residual=None if res is None else res[0])
        assert y3.shape == (3, 7, 9)
        torch.testing.assert_close(y3, m(x, residual=res)[0])
        assert_close_to(y3, ref_fused(x, m.weight, m.bias, res, "gelu", 0.0)[0][0], torch.float32, f"res={res is not None}")


@pytest.mark.parametrize("affine,track", [(False, False), (True, False), (False, True), (True, True)])
def test_state_dict_round_trip(inorm, affine, track):
    ours = inorm.InstanceNormAct2d(5, affine=affine, track_running_stats=track, activation="leaky_relu",
                                   negative_slope=0.1)
    eager = nn.InstanceNorm2d(5, affine=affine, track_running_stats=track)
    assert list(ours.state_dict()) == list(eager.state_dict())
    for src, dst in ((eager, ours), (ours, eager)):
        dst.load_state_dict(randomize(src).state_dict())
        for key, value in src.state_dict().items():
            assert torch.equal(dst.state_dict()[key], value), key


def test_repr_subclass_and_bad_activation(inorm):
    assert issubclass(inorm.InstanceNormAct2d, inorm.ModelNew)
    assert re.search(r"\brelu\b", repr(inorm.InstanceNormAct2d(4))), "default activation is relu"
    for act in ACTS:
        assert re.search(rf"\b{act}\b", repr(inorm.InstanceNormAct2d(4, activation=act))), act
    for bad in ("tanh", "", "swish"):
        with pytest.raises(ValueError):
            inorm.InstanceNormAct2d(4, activation=bad)


# =========================================================================== 5. fuse_activations

def assert_grads_close(got, expected, tol, what):
    """Elementwise within tol, absolute part relative to the largest gradient of all (a conv bias before a norm
    has a gradient of ~0)."""
    scale = max(e.abs().max().item() for e in expected)
    for i, (g, e) in enumerate(zip(got, expected)):
        torch.testing.assert_close(g, e, rtol=tol, atol=tol * scale, msg=f"{what}: gradient {i}")


FUSED = {"1": "relu", "4": "leaky_relu", "6.1": "silu", "7.0": "gelu_tanh", "12": "gelu"}
IDENTITIES = ["2", "5", "6.2", "7.1", "13"]
UNTOUCHED = {"8": nn.InstanceNorm2d, "9": nn.Tanh, "10": nn.InstanceNorm2d, "15": nn.InstanceNorm2d}


@pytest.mark.parametrize("device", DEVICES)
def test_fuse_activations(inorm, rng, device):
    net = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.InstanceNorm2d(8, affine=True), nn.ReLU(inplace=True),  # 0-2
        nn.Conv2d(8, 8, 3, padding=1), inorm.ModelNew(8, affine=True, track_running_stats=True),  # 3-4
        nn.LeakyReLU(0.2),  # 5
        nn.Sequential(nn.Conv2d(8, 8, 1), nn.InstanceNorm2d(8), nn.SiLU()),  # 6
        nn.Sequential(nn.InstanceNorm2d(8, affine=True), nn.GELU(approximate="tanh"), nn.Conv2d(8, 8, 1)),  # 7
        nn.InstanceNorm2d(8, affine=True), nn.Tanh(),  # 8-9: not a supported activation
        nn.InstanceNorm2d(8), nn.Conv2d(8, 8, 1),  # 10-11: followed by something else
        nn.InstanceNorm2d(8, affine=True), nn.GELU(), nn.Conv2d(8, 4, 1),  # 12-14
        nn.InstanceNorm2d(4, affine=True),  # 15: last
    ).to(device)
    for m in net.modules():
        if isinstance(m, nn.InstanceNorm2d):
            randomize(m)
    before = copy.deepcopy(net)
    keys = list(net.state_dict())
    assert inorm.fuse_activations(net) is net
    assert list(net.state_dict()) == keys
    for path, act in FUSED.items():
        m = net.get_submodule(path)
        assert type(m) is inorm.InstanceNormAct2d and re.search(rf"\b{act}\b", repr(m)), f"{path}: {m!r}"
        old = before.get_submodule(path)
        for attr in ("num_features", "eps", "momentum", "affine", "track_running_stats"):
            assert getattr(m, attr) == getattr(old, attr), f"{path}.{attr}"
    for path in IDENTITIES:
        assert type(net.get_submodule(path)) is nn.Identity, path
    for path, kind in UNTOUCHED.items():
        assert type(net.get_submodule(path)) is kind, path
    for training in (True, False):
        net.train(training)
        before.train(training)
        x = torch.randn(2, 3, 13, 11, device=device)
        y, y_before = net(x), before(x)
        torch.testing.assert_close(y, y_before, rtol=1e-4, atol=1e-4, msg=f"training={training}")
        grads = torch.autograd.grad(y.square().sum(), list(net.parameters()))
        grads_before = torch.autograd.grad(y_before.square().sum(), list(before.parameters()))
        assert_grads_close(grads, grads_before, 1e-3, f"training={training}")
        for key, value in before.state_dict().items():  # running statistics updated alike
            torch.testing.assert_close(net.state_dict()[key], value, rtol=1e-5, atol=1e-5, msg=key)


# =========================================================================== 6. torch.compile

@pytest.fixture
def fresh_dynamo():
    import torch._dynamo
    import torch._functorch.config
    import torch._inductor.config

    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


class Block(nn.Module):
    def __init__(self, norm, act, combine):
        super().__init__()
        self.norm, self.act, self.combine = norm, act, combine

    def forward(self, x, r=None):
        return self.combine(self.act, self.norm(x), r)


COMPILE_CASES = {  # name: (model from a norm, takes a residual, fused_forward calls expected)
    "sequential_leaky": (lambda n: nn.Sequential(n, nn.LeakyReLU(0.2)), False, 1),
    "relu_plus_r": (lambda n: Block(n, nn.ReLU(), lambda a, y, r: a(y) + r), True, 1),
    "r_plus_gelu_tanh": (lambda n: Block(n, nn.GELU(approximate="tanh"), lambda a, y, r: r + a(y)), True, 1),
    "torch_add_silu": (lambda n: Block(n, nn.SiLU(), lambda a, y, r: torch.add(a(y), r)), True, 1),
    "other_user": (lambda n: Block(n, nn.ReLU(), lambda a, y, r: a(y) + y), False, 0),
}


def compile_pair(inorm, make, c=6):
    ours = make(inorm.ModelNew(c, affine=True)).cuda()
    randomize(ours[0] if isinstance(ours, nn.Sequential) else ours.norm)
    eager = make(nn.InstanceNorm2d(c, affine=True)).cuda()
    eager.load_state_dict(ours.state_dict())
    return ours, eager


def step(model, x, r, dy):
    inputs = [t.detach().clone().requires_grad_() for t in (x, r) if t is not None]
    y = model(*inputs)
    return y.detach().clone(), torch.autograd.grad(y, inputs + list(model.parameters()), dy)


def compile_inputs(rng, shape, residual, model):
    """x, r and a grad_output zeroed near the kink of relu / leaky_relu (harmless for smooth activations)."""
    x = make_input(shape, torch.float32, rng, log_scale=(-0.5, 0.5))
    norm = model[0] if isinstance(model, nn.Sequential) else model.norm
    dy = kink_safe(torch.randn(shape, device="cuda"), reference(x, norm.weight, norm.bias), "relu")
    return x, (torch.randn(shape, device="cuda") if residual else None), dy


def assert_step_close(got, expected, what):
    torch.testing.assert_close(got[0], expected[0], rtol=1e-4, atol=1e-4, msg=f"{what}: output")
    assert_grads_close(got[1], expected[1], 1e-4, what)


def count_calls(inorm, codes, op):
    return sum(c.count(f"torch.ops.{inorm._NAMESPACE}.{op}.default(") for c in codes)


def eval_preactivation(x, norm):
    """Eval mode's pre-activation in float64 (running statistics, weight, bias), for kink_safe."""
    def per_channel(t):
        return t.double().view(-1, 1, 1)

    return ((x.double() - per_channel(norm.running_mean)) * torch.rsqrt(per_channel(norm.running_var) + EPS)
            * per_channel(norm.weight) + per_channel(norm.bias))


def compiled_step(inorm, model, x, r, dy):
    """step() through torch.compile(model) with the FX and autograd caches off; also the (target, args)
    of every norm op (forward, fused_forward, eval_forward) in the post-grad graphs."""
    op = getattr(torch.ops, inorm._NAMESPACE)
    norms = (op.eval_forward.default, op.forward.default, op.fused_forward.default)
    seen = []

    def observe(graph):  # a plain callable here also keeps the FX graph cache out of the way
        seen.extend((n.target, n.args) for n in graph.nodes if n.target in norms)

    with torch._inductor.config.patch(post_grad_custom_post_pass=observe, fx_graph_cache=False), \
            torch._functorch.config.patch(enable_autograd_cache=False):
        return step(torch.compile(model), x, r, dy), seen


def assert_same_state(ours, eager):
    for key, value in eager.state_dict().items():
        torch.testing.assert_close(ours.state_dict()[key], value, rtol=1e-5, atol=1e-5, msg=key)


@pytest.mark.parametrize("case", list(COMPILE_CASES))
@CUDA
def test_compile_fusion_pass(inorm, rng, fresh_dynamo, case):
    from torch._inductor.utils import run_and_get_code

    make, residual, expected = COMPILE_CASES[case]
    ours, eager = compile_pair(inorm, make)
    compiled = torch.compile(ours)
    x, r, dy = compile_inputs(rng, (3, 6, 17, 23), residual, ours)
    with torch._inductor.config.patch(fx_graph_cache=False), torch._functorch.config.patch(enable_autograd_cache=False):
        got, codes = run_and_get_code(step, compiled, x, r, dy)
    assert_step_close(got, step(eager, x, r, dy), case)
    assert count_calls(inorm, codes, "fused_forward") == expected, f"{case}: fused_forward calls"
    assert count_calls(inorm, codes, "forward") == 1 - expected, f"{case}: unfused forward calls"


@pytest.mark.parametrize("case", list(COMPILE_CASES))
@CUDA
def test_compile_fusion_pass_eval(inorm, rng, fresh_dynamo, case):
    """Eval mode with running statistics: the activation and the add go into eval_forward's epilogue
    (one call in the post-grad graph, with a residual or a non-zero act), gradients through
    eval_backward, against nn.InstanceNorm2d's block in eval mode."""
    make, residual, expected = COMPILE_CASES[case]
    ours = make(inorm.ModelNew(6, affine=True, track_running_stats=True)).cuda()
    norm = ours[0] if isinstance(ours, nn.Sequential) else ours.norm
    randomize(norm)
    with torch.no_grad():
        norm.running_mean.copy_(torch.randn(6) * 0.5)
        norm.running_var.copy_(torch.rand(6) + 0.5)
    eager = make(nn.InstanceNorm2d(6, affine=True, track_running_stats=True)).cuda()
    eager.load_state_dict(ours.state_dict())
    ours.eval()
    eager.eval()
    x, r, dy = compile_inputs(rng, (3, 6, 17, 23), residual, ours)
    dy = kink_safe(dy, eval_preactivation(x, norm), "relu")  # eval's pre-activation, not the normalized one
    op = getattr(torch.ops, inorm._NAMESPACE)
    got, seen = compiled_step(inorm, ours, x, r, dy)
    assert_step_close(got, step(eager, x, r, dy), case)
    assert len(seen) == 1 and seen[0][0] == op.eval_forward.default and len(seen[0][1]) >= 6, f"{case}: {seen}"
    args = list(seen[0][1]) + [None, 0, 0.0][len(seen[0][1]) - 6:]
    assert (args[6] is not None or args[7] != 0) == bool(expected), f"{case}: eval_forward's epilogue {args[6:]}"


@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
@CUDA
def test_compile_add_after_act_module(inorm, rng, fresh_dynamo, training):
    """An add after InstanceNormAct2d (its activation already in the op's epilogue) fuses as the
    residual under torch.compile: one fused op in the post-grad graph, carrying the residual and the
    module's activation; outputs and gradients against nn.InstanceNorm2d + LeakyReLU + r, in training
    (running statistics updated alike) and in eval mode with running statistics."""
    act_norm = inorm.InstanceNormAct2d(6, affine=True, track_running_stats=True, activation="leaky_relu",
                                       negative_slope=0.2)
    ours = Block(act_norm, nn.Identity(), lambda a, y, r: y + r).cuda()
    randomize(act_norm)
    eager = Block(nn.InstanceNorm2d(6, affine=True, track_running_stats=True), nn.LeakyReLU(0.2),
                  lambda a, y, r: a(y) + r).cuda()
    eager.load_state_dict(ours.state_dict())
    ours.train(training)
    eager.train(training)
    x, r, dy = compile_inputs(rng, (3, 6, 17, 23), True, ours)
    if not training:  # eval's pre-activation, not the instance-normalized one
        dy = kink_safe(dy, eval_preactivation(x, act_norm), "relu")
    op = getattr(torch.ops, inorm._NAMESPACE)
    got, seen = compiled_step(inorm, ours, x, r, dy)
    assert_step_close(got, step(eager, x, r, dy), f"training={training}")
    assert_same_state(ours, eager)
    assert len(seen) == 1, seen
    target, args = seen[0]
    leaky = inorm.ACTIVATIONS.index("leaky_relu")
    if training:
        assert target == op.fused_forward.default and args[3] is not None and tuple(args[5:7]) == (leaky, 0.2), args
    else:
        assert target == op.eval_forward.default and args[6] is not None and tuple(args[7:9]) == (leaky, 0.2), args


@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
@CUDA
def test_compile_unbatched(inorm, rng, fresh_dynamo, training):
    """Unbatched (C, H, W) input under torch.compile: relu and + r fuse across the module's
    squeeze(0) (one norm op in the post-grad graph, carrying the residual and relu), against
    nn.InstanceNorm2d's block: outputs, gradients, running statistics; train and eval."""
    combine = lambda a, y, r: a(y) + r  # noqa: E731
    ours = Block(inorm.ModelNew(6, affine=True, track_running_stats=True), nn.ReLU(), combine).cuda()
    randomize(ours.norm)
    eager = Block(nn.InstanceNorm2d(6, affine=True, track_running_stats=True), nn.ReLU(), combine).cuda()
    eager.load_state_dict(ours.state_dict())
    ours.train(training)
    eager.train(training)
    x, r, dy = (t[0] for t in compile_inputs(rng, (1, 6, 17, 23), True, ours))
    if not training:  # eval's pre-activation, not the instance-normalized one
        dy = kink_safe(dy, eval_preactivation(x, ours.norm), "relu")
    op = getattr(torch.ops, inorm._NAMESPACE)
    got, seen = compiled_step(inorm, ours, x, r, dy)
    expected = step(eager, x, r, dy)
    assert (got[0].shape, got[0].stride()) == (expected[0].shape, expected[0].stride())
    assert_step_close(got, expected, f"training={training}")
    assert_same_state(ours, eager)
    assert len(seen) == 1, seen
    target, args = seen[0]
    relu = inorm.ACTIVATIONS.index("relu")
    if training:
        assert target == op.fused_forward.default and args[3] is not None and args[5] == relu, args
    else:
        assert target == op.eval_forward.default and args[6] is not None and args[7] == relu, args


@pytest.mark.parametrize("options", [dict(fullgraph=True), dict(dynamic=True), dict(mode="reduce-overhead")],
                         ids=["fullgraph", "dynamic", "reduce-overhead"])
@CUDA
def test_compile_options(inorm, rng, fresh_dynamo, options):
    ours, eager = compile_pair(inorm, lambda n: Block(n, nn.LeakyReLU(0.2), lambda a, y, r: a(y) + r))
    compiled = torch.compile(ours, **options)
    for i, shape in enumerate([(2, 6, 16, 24), (3, 6, 9, 31), (2, 6, 16, 24), (3, 6, 9, 31)]):
        if options.get("mode") == "reduce-overhead":
            torch.compiler.cudagraph_mark_step_begin()
        x, r, dy = compile_inputs(rng, shape, True, ours)
        assert_step_close(step(compiled, x, r, dy), step(eager, x, r, dy), f"call {i} shape={shape}")


@CUDA
def test_compiled_training_loop(inorm, rng, fresh_dynamo):
    def net(norm):
        return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), norm(8, affine=True), nn.LeakyReLU(0.2),
                             nn.Conv2d(8, 8, 3, padding=1), norm(8, affine=True), nn.ReLU(),
                             nn.Conv2d(8, 3, 3, padding=1)).cuda()

    ours, eager = net(inorm.ModelNew), net(nn.InstanceNorm2d)
    randomize(ours[1])
    randomize(ours[4])
    eager.load_state_dict(ours.state_dict())
    compiled = torch.compile(ours)
    optimizers = [torch.optim.SGD(m.parameters(), lr=0.05) for m in (ours, eager)]
    for i in range(3):
        x, target = torch.randn(4, 3, 20, 20, device="cuda"), torch.randn(4, 3, 20, 20, device="cuda")
        losses, grads = [], []
        for model, opt in zip((compiled, eager), optimizers):
            opt.zero_grad()
            loss = F.mse_loss(model(x), target)
            loss.backward()
            losses.append(loss.item())
            grads.append([p.grad.clone() for p in (ours if model is compiled else eager).parameters()])
            opt.step()
        assert abs(losses[0] - losses[1]) <= 1e-4 * max(1.0, abs(losses[1])), f"step {i}: {losses}"
        assert_grads_close(grads[0], grads[1], 1e-3, f"step {i}")


# =========================================================================== 7. errors and op registration

BAD_RESIDUALS = {
    "shape": lambda x: torch.randn(*x.shape[:3], x.shape[3] + 1, device=x.device),
    "broadcast": lambda x: torch.randn(1, x.shape[1], 1, 1, device=x.device),
    "rank": lambda x: torch.randn(x.shape[1:], device=x.device),
    "dtype": lambda x: torch.randn(x.shape, device=x.device, dtype=torch.float16),
    "device": lambda x: torch.randn(x.shape),
}


def assert_still_works(ops, rng):
    torch.cuda.synchronize()
    x = make_input((2, 3, 6, 7), torch.float32, rng)
    y, _ = ops.fused_forward(x, None, None, None, EPS, ACTS.index("relu"), 0.0)
    assert_close_to(y, F.relu(reference(x)), torch.float32, "after the error")


@pytest.mark.parametrize("kind", list(BAD_RESIDUALS))
@CUDA
def test_bad_residual_raises(inorm, ops, rng, kind):
    x = make_input((2, 3, 6, 7), torch.float32, rng)
    w, b = affine_params(3, torch.float32)
    rm, rv = torch.zeros(3, device="cuda"), torch.ones(3, device="cuda")
    bad = BAD_RESIDUALS[kind](x)
    calls = [lambda: ops.fused_forward(x, w, b, bad, EPS, 1, 0.0),
             lambda: inorm.forward_with_plan(x, w, b, EPS, inorm.Plan.multi_cta(), residual=bad, act=1, slope=0.0),
             lambda: ops.eval_forward(x, rm, rv, w, b, EPS, bad, 1, 0.0)]
    for call in calls:
        with pytest.raises((RuntimeError, ValueError)):
            call()
            torch.cuda.synchronize()
        assert_still_works(ops, rng)


@pytest.mark.parametrize("act", [-1, 6, 1000])
@CUDA
def test_bad_act_code_raises(inorm, ops, rng, act):
    x = make_input((2, 3, 6, 7), torch.float32, rng)
    w, b = affine_params(3, torch.float32)
    rm, rv = torch.zeros(3, device="cuda"), torch.ones(3, device="cuda")
    dy = torch.randn_like(x)
    _, stats = ops.fused_forward(x, w, b, None, EPS, 0, 0.0)
    calls = [lambda: ops.fused_forward(x, w, b, None, EPS, act, 0.0),
             lambda: ops.backward(dy, x, w, b, stats, act, 0.0),
             lambda: ops.eval_forward(x, rm, rv, w, b, EPS, None, act, 0.0),
             lambda: ops.eval_backward(dy, x, rm, rv, w, b, EPS, act, 0.0),
             lambda: inorm.forward_with_plan(x, w, b, EPS, inorm.Plan.multi_cta(), act=act),
             lambda: inorm.backward_with_plan(dy, x, w, b, stats, inorm.Plan.multi_cta(), act=act)]
    for call in calls:
        with pytest.raises((RuntimeError, ValueError)):
            call()
            torch.cuda.synchronize()
        assert_still_works(ops, rng)


@CUDA
def test_opcheck_and_gradcheck(ops, rng):
    x = torch.randn(2, 3, 5, 6, device="cuda", requires_grad=True)
    w, b, r = (torch.randn(s, device="cuda", requires_grad=True) for s in (3, 3, (2, 3, 5, 6)))
    rm, rv = torch.randn(3, device="cuda"), torch.rand(3, device="cuda") + 0.5
    for code, slope in ((2, 0.2), (4, 0.0), (5, 0.0)):
        torch.library.opcheck(ops.fused_forward.default, (x, w, b, r, EPS, code, slope))
        torch.library.opcheck(ops.fused_forward.default, (x, None, None, None, EPS, code, slope))
        torch.library.opcheck(ops.eval_forward.default, (x, rm, rv, w, b, EPS, r, code, slope))
        _, stats = ops.fused_forward(x.detach(), w.detach(), b.detach(), None, EPS, code, slope)
        dy = torch.randn_like(x)
        torch.library.opcheck(ops.backward.default, (dy, x.detach(), w.detach(), b.detach(), stats, code, slope))
        torch.library.opcheck(ops.eval_backward.default, (dy, x.detach(), rm, rv, w.detach(), b.detach(), EPS, code, slope))
    d = [t.detach().double().requires_grad_() for t in (x, w, b, r)]
    rmd, rvd = rm.double(), rv.double()
    for code in (0, 3, 4, 5):  # the smooth activations (finite differences across a kink would fail)
        assert torch.autograd.gradcheck(lambda *a: ops.fused_forward(*a, EPS, code, 0.0)[0], tuple(d))
        assert torch.autograd.gradcheck(
            lambda xx, ww, bb, rr: ops.eval_forward(xx, rmd, rvd, ww, bb, EPS, rr, code, 0.0), tuple(d))


@pytest.mark.parametrize("device", DEVICES)
def test_module_reads_its_attributes_at_call(inorm, device):
    """Changing `negative_slope` or `activation` after construction takes effect, as with nn.LeakyReLU."""
    m = inorm.InstanceNormAct2d(3, activation="leaky_relu", negative_slope=0.1).to(device)
    x = torch.randn(2, 3, 5, 7, device=device)
    ref = nn.InstanceNorm2d(3).to(device)
    m.negative_slope = 0.5
    torch.testing.assert_close(m(x), F.leaky_relu(ref(x), 0.5), rtol=1e-5, atol=1e-5)
    m.activation = "silu"
    torch.testing.assert_close(m(x), F.silu(ref(x)), rtol=1e-5, atol=1e-5)
    m.activation = "tanh"
    with pytest.raises(ValueError):
        m(x)


def test_meta_kernels_check_the_epilogue(inorm):
    """Under torch.compile the fake kernels refuse what the CUDA kernels refuse (no GPU needed)."""
    ops = inorm.load_extension()
    x = torch.empty(2, 3, 5, 7, device="meta")
    for bad in (torch.empty(2, 3, 5, 6, device="meta"), torch.empty(2, 3, 5, 7, device="meta", dtype=torch.float64)):
        with pytest.raises(RuntimeError):
            ops.fused_forward(x, None, None, bad, EPS, 1, 0.0)
        with pytest.raises(RuntimeError):
            ops.eval_forward(x, torch.empty(3, device="meta"), torch.empty(3, device="meta"), None, None, EPS, bad, 1, 0.0)
    with pytest.raises(RuntimeError):
        ops.fused_forward(x, None, None, None, EPS, 6, 0.0)

