"""Training through ModelNew: gradients, custom-op registration, torch.compile and CUDA graphs (GPU).

Seeds, the module fixture and the GPU marker come from conftest.py, so INSTANCE_NORM_TEST_SEED
reproduces a failure here as everywhere.
"""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from conftest import expect_layout

pytestmark = pytest.mark.requires_cuda

GRAD_TOL = {torch.float32: 1e-4, torch.float16: 2e-2, torch.bfloat16: 1e-1, torch.float64: 1e-10}


@pytest.fixture
def gen(seed):
    """A CUDA generator seeded with the test's seed."""
    return torch.Generator(device="cuda").manual_seed(seed)


def grads_of(module, x, dy):
    x = x.detach().clone().requires_grad_(True)
    y = module(x)
    params = [p for p in (module.weight, module.bias) if p is not None]
    grads = torch.autograd.grad(y, [x] + params, dy)
    return y.detach(), grads


def reference_grads(x, dy, weight, bias, eps):
    """float64 autograd through F.instance_norm: the ground truth for every dtype."""
    xd = x.detach().double().requires_grad_(True)
    params = []
    wd = bd = None
    if weight is not None:
        wd = weight.detach().double().requires_grad_(True)
        bd = bias.detach().double().requires_grad_(True)
        params = [wd, bd]
    y = F.instance_norm(xd, weight=wd, bias=bd, eps=eps)
    return torch.autograd.grad(y, [xd] + params, dy.double())


# (1, 8, 512, 512) float32, (1, 16, 320, 320) float32 and (2, 8, 384, 384) 16-bit: the forward on a wide
# stream plan (wide_forward, on the H200), the backward on its own K=8 plan, from the forward's statistics.
SHAPES = [(2, 3, 7, 9), (4, 16, 32, 32), (3, 5, 127, 129), (2, 4, 256, 256), (8, 64, 56, 56), (1, 2, 1030, 1031),
          (1, 8, 512, 512), (1, 16, 320, 320), (2, 8, 384, 384)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("affine", [False, True])
def test_gradients_match(inorm, shape, dtype, affine, gen, seed):
    c = shape[1]
    ours = inorm.ModelNew(c, affine=affine).cuda()
    eager = nn.InstanceNorm2d(c, affine=affine).cuda()
    if affine:
        with torch.no_grad():
            w = torch.randn(c, device="cuda", generator=gen)
            b = torch.randn(c, device="cuda", generator=gen)
            for m in (ours, eager):
                m.weight.copy_(w)
                m.bias.copy_(b)
    x = (torch.randn(shape, device="cuda", generator=gen) * 3 + 2).to(dtype)
    dy = torch.randn(shape, device="cuda", generator=gen).to(dtype)
    _, ours_g = grads_of(ours, x, dy)
    ref_g = reference_grads(x, dy, ours.weight, ours.bias, ours.eps)
    for got, want in zip(ours_g, ref_g):
        err = (got.double() - want).abs().max().item()
        scale = max(1.0, want.abs().max().item())
        assert err <= GRAD_TOL[dtype] * scale, f"seed={seed} max abs err {err}"
    if dtype == torch.float32:  # and against PyTorch's own float32 gradients
        _, eager_g = grads_of(eager, x, dy)
        for got, want in zip(ours_g, eager_g):
            assert (got - want).abs().max().item() <= 1e-4 * max(1.0, want.abs().max().item()), f"seed={seed}"


@pytest.mark.parametrize("layout", ["channels_last", "transposed"])
def test_gradients_any_layout(inorm, layout, gen, seed):
    x = torch.randn(2, 6, 33, 47, device="cuda", generator=gen)
    dy = torch.randn(2, 6, 33, 47, device="cuda", generator=gen)
    if layout == "channels_last":
        x = x.to(memory_format=torch.channels_last)
        dy = dy.to(memory_format=torch.channels_last)
    else:
        x = x.transpose(2, 3).contiguous().transpose(2, 3)
    y, ours_g = grads_of(inorm.ModelNew(6).cuda(), x, dy)
    ref_g = reference_grads(x, dy, None, None, 1e-5)
    assert (ours_g[0].double() - ref_g[0]).abs().max().item() < 1e-4, f"seed={seed}"
    expect_layout(y, x, None, layout)  # channels-last in, channels-last out; other strides: contiguous
    expect_layout(ours_g[0], x, None, f"{layout} dx")


def test_gradients_track_running_stats_train_and_eval(inorm, gen, seed):
    ours = inorm.ModelNew(5, affine=True, track_running_stats=True).cuda()
    eager = nn.InstanceNorm2d(5, affine=True, track_running_stats=True).cuda()
    eager.load_state_dict(ours.state_dict())
    for mode in ("train", "eval"):
        ours.train(mode == "train")
        eager.train(mode == "train")
        x = torch.randn(3, 5, 20, 24, device="cuda", generator=gen)
        dy = torch.randn(3, 5, 20, 24, device="cuda", generator=gen)
        _, ours_g = grads_of(ours, x, dy)
        _, eager_g = grads_of(eager, x, dy)
        for got, want in zip(ours_g, eager_g):
            assert torch.allclose(got, want, atol=1e-4, rtol=1e-4), f"{mode} seed={seed}"
        assert torch.allclose(ours.running_mean, eager.running_mean, atol=1e-6)
        assert torch.allclose(ours.running_var, eager.running_var, atol=1e-5)


# (N, C) around the per-channel kernels' two instances: warp_sums below kBatchSumMinBatch (96: N 1, 7, 33), and
# batch_sums' tiles from it on, C below, at and past kBatchSumChannels (8) and many tiles (1030), N past
# kBatchSumSlices (128) slices and their unrolled loop, and from kBatchSumNarrowMinBatch (4096) on with few channels
# the tiles of kBatchSumNarrowChannels (N 4100: 512 slices), C 3 (two CTAs, the second's second channel past C) and
# 40 in the running statistics, and 257 (129 CTAs) in the affine gradients too (tiles of 8 at N >= 4096 need C
# above 4 * SMs: not tested); the affine gradients' row pass from kRowSumMinBatch (4096) on up to kRowSumMaxChannels
# (256): C 1 (256 phases), 3, 40, 129 (one phase) and 256, with a short last CTA at N 4100 and 4111 (257 CTAs of 16
# rows on 132 SMs; chunks past kRowSumThreads channels are not reached); float32
# and float64 sums (acc_t float / double). (The grid-stride second pass over tiles needs more than kMaxGrid tiles:
# not tested.)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("nc", [(1, 3), (7, 9), (129, 7), (1000, 17), (33, 1030), (300, 8), (97, 1030), (4100, 3),
                                (4100, 40), (4096, 1), (4100, 129), (4111, 256), (4096, 257)],
                         ids=str)
def test_batch_sums(inorm, nc, dtype, gen, seed):
    """The per-channel sums over the batch: dweight and dbias against float64 autograd, and the running
    statistics after one training step against nn.InstanceNorm2d's."""
    n, c = nc
    ours = inorm.ModelNew(c, affine=True, track_running_stats=True).cuda().to(dtype)
    eager = nn.InstanceNorm2d(c, affine=True, track_running_stats=True).cuda().to(dtype)
    with torch.no_grad():
        ours.weight.copy_(torch.randn(c, device="cuda", generator=gen))
        ours.bias.copy_(torch.randn(c, device="cuda", generator=gen))
    eager.load_state_dict(ours.state_dict())
    x = (torch.randn(n, c, 3, 5, device="cuda", generator=gen) * 2 + 1).to(dtype)
    dy = torch.randn(n, c, 3, 5, device="cuda", generator=gen).to(dtype)
    _, (dx, dw, db) = grads_of(ours, x, dy)
    ref = reference_grads(x, dy, ours.weight, ours.bias, ours.eps)
    for name, got, want in (("dweight", dw, ref[1]), ("dbias", db, ref[2])):
        rel = (got.double() - want).norm().item() / max(want.norm().item(), 1e-30)
        assert rel < 1e-4, f"{name} relative error {rel} seed={seed}"
    grads_of(eager, x, dy)
    torch.testing.assert_close(ours.running_mean, eager.running_mean, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(ours.running_var, eager.running_var, atol=1e-5, rtol=1e-5)


def plans_for(inorm, x):
    """The backward plans the host accepts for x, worth timing (the plan space's own rules)."""
    return inorm.candidate_plans(x, backward=True, tight=True)


def check_backward_plans(inorm, x, dy, w, plans, seed):
    """Every plan's dx, dweight and dbias against float64 autograd; dx poisoned first. The affine
    gradients are checked by their relative error, so that zeros fail in every dtype."""
    ops = inorm.load_extension()
    b = torch.randn_like(w)
    _, stats = ops.forward(x, w, b, 1e-5)
    ref = reference_grads(x, dy, w, b, 1e-5)
    for plan in plans:
        poisoned = torch.full_like(x, float("nan"))  # recycled by the allocator for dx if anything stays unwritten
        del poisoned
        dx, dw, db = inorm.backward_with_plan(dy, x, w, b, stats, plan)
        assert not torch.isnan(dx).any(), f"plan {plan} left elements unwritten, seed={seed}"
        err = (dx.double() - ref[0]).abs().max().item() / max(1.0, ref[0].abs().max().item())
        assert err < GRAD_TOL[x.dtype], f"plan {plan} err {err} seed={seed}"
        for name, got, want in (("dweight", dw, ref[1]), ("dbias", db, ref[2])):
            rel = (got.double() - want).norm().item() / max(want.norm().item(), 1e-30)
            assert rel < 1e-3, f"plan {plan} {name} relative error {rel} seed={seed}"


@pytest.mark.parametrize("shape", [(2, 3, 37, 41), (1, 2, 128, 127), (2, 2, 256, 256)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_backward_every_plan(inorm, shape, dtype, gen, seed):
    x = (torch.randn(shape, device="cuda", generator=gen) + 5).to(dtype)
    dy = torch.randn(shape, device="cuda", generator=gen).to(dtype)
    w = torch.randn(shape[1], device="cuda", generator=gen)
    check_backward_plans(inorm, x, dy, w, plans_for(inorm, x), seed)


@pytest.mark.parametrize("shape", [(3, 130, 64, 64), (4, 16, 512, 512)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_backward_stream_many_instances(inorm, shape, dtype, gen, seed):
    """The stream backward with more instances than resident clusters, so that each cluster
    goes round its stages several times."""
    if torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("the stream kernel needs sm_90+")
    x = (torch.randn(shape, device="cuda", generator=gen) * 3 - 2).to(dtype)
    dy = torch.randn(shape, device="cuda", generator=gen).to(dtype)
    w = torch.randn(shape[1], device="cuda", generator=gen)
    plans = [p for p in plans_for(inorm, x) if p.regime == "stream"]
    assert plans, "no stream plan for a whole-vector instance"
    check_backward_plans(inorm, x, dy, w, plans, seed)


@pytest.mark.parametrize("shape", [(4, 64, 256, 256), (4100, 40, 3, 3)], ids=str)
def test_backward_is_deterministic(inorm, gen, shape):
    """Bitwise the same gradients twice: a large instance's plan, and the affine gradients' row pass over a large
    batch (partials per CTA, added in a fixed order)."""
    m = inorm.ModelNew(shape[1], affine=True).cuda()
    x = torch.randn(shape, device="cuda", generator=gen)
    dy = torch.randn_like(x)
    _, g1 = grads_of(m, x, dy)
    _, g2 = grads_of(m, x, dy)
    for a, b in zip(g1, g2):
        assert torch.equal(a, b)


def test_gradcheck_float64(inorm, gen):
    m = inorm.ModelNew(3, affine=True).cuda().double()
    with torch.no_grad():
        m.weight.copy_(torch.randn(3, device="cuda", generator=gen, dtype=torch.float64))
        m.bias.copy_(torch.randn(3, device="cuda", generator=gen, dtype=torch.float64))
    x = torch.randn(2, 3, 5, 6, device="cuda", dtype=torch.float64, generator=gen, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: m(t), (x,))


def test_double_backward_raises_clearly(inorm):
    m = inorm.ModelNew(3).cuda()
    x = torch.randn(2, 3, 8, 8, device="cuda", requires_grad=True)
    (gx,) = torch.autograd.grad(m(x).pow(2).sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="double backward"):
        gx.sum().backward()


def test_opcheck(inorm):
    ops = inorm.load_extension()
    x = torch.randn(2, 3, 9, 10, device="cuda", requires_grad=True)
    w = torch.randn(3, device="cuda", requires_grad=True)
    b = torch.randn(3, device="cuda", requires_grad=True)
    torch.library.opcheck(ops.forward.default, (x, w, b, 1e-5))
    torch.library.opcheck(ops.forward.default, (x, None, None, 1e-5))
    _, stats = ops.forward(x.detach(), w.detach(), b.detach(), 1e-5)
    torch.library.opcheck(ops.backward.default, (torch.randn_like(x), x.detach(), w.detach(), b.detach(), stats))
    torch.library.opcheck(ops.backward.default, (torch.randn_like(x), x.detach(), None, None, stats))
    rm, rv = torch.randn(3, device="cuda"), torch.rand(3, device="cuda") + 0.5
    torch.library.opcheck(ops.eval_forward.default, (x, rm, rv, w, b, 1e-5))
    torch.library.opcheck(ops.eval_forward.default, (x, rm, rv, None, None, 1e-5))


class SmallNet(nn.Module):
    def __init__(self, norm):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.norm1 = norm(8, affine=True)
        self.conv2 = nn.Conv2d(8, 3, 3, padding=1)
        self.norm2 = norm(3, affine=True, track_running_stats=True)

    def forward(self, x):
        return self.norm2(self.conv2(torch.relu(self.norm1(self.conv1(x)))))


def test_compile_fullgraph_matches_eager(inorm):
    net = SmallNet(inorm.ModelNew).cuda()
    ref = SmallNet(nn.InstanceNorm2d).cuda()
    ref.load_state_dict(net.state_dict())
    compiled = torch.compile(net, fullgraph=True)
    x = torch.randn(4, 3, 32, 32, device="cuda", requires_grad=True)
    y = compiled(x)
    y_ref = ref(x)
    assert torch.allclose(y, y_ref, atol=1e-4, rtol=1e-4)
    (gx,) = torch.autograd.grad(y.square().sum(), x)
    (gx_ref,) = torch.autograd.grad(y_ref.square().sum(), x)
    assert torch.allclose(gx, gx_ref, atol=1e-3, rtol=1e-3)


def test_training_loop_losses_match(inorm, seed):
    net = SmallNet(inorm.ModelNew).cuda()
    ref = SmallNet(nn.InstanceNorm2d).cuda()
    ref.load_state_dict(net.state_dict())
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    opt_ref = torch.optim.SGD(ref.parameters(), lr=0.05)
    data = [(torch.randn(8, 3, 24, 24, device="cuda"), torch.randn(8, 3, 24, 24, device="cuda")) for _ in range(10)]
    for x, target in data:
        losses = []
        for model, optimizer in ((net, opt), (ref, opt_ref)):
            optimizer.zero_grad()
            loss = F.mse_loss(model(x), target)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        assert abs(losses[0] - losses[1]) <= 1e-4 * max(1.0, abs(losses[1])), f"seed={seed} {losses}"


def test_training_step_cuda_graph(inorm):
    net = SmallNet(inorm.ModelNew).cuda()
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    static_x = torch.randn(4, 3, 16, 16, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):  # warm-up on a side stream, as the CUDA graphs docs ask
            opt.zero_grad(set_to_none=True)
            net(static_x).square().mean().backward()
            opt.step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)
    with torch.cuda.graph(graph):
        static_loss = net(static_x).square().mean()
        static_loss.backward()
    static_x.copy_(torch.randn_like(static_x))
    graph.replay()
    torch.cuda.synchronize()
    grads = [p.grad.clone() for p in net.parameters()]
    for p in net.parameters():
        p.grad = None
    loss = net(static_x).square().mean()
    loss.backward()
    assert torch.allclose(static_loss, loss, atol=1e-5)
    for g, p in zip(grads, net.parameters()):
        assert torch.allclose(g, p.grad, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("module", ["ModelNew", "InstanceNormAct2d"])
@pytest.mark.parametrize("track", [False, True], ids=["instance", "running"])
def test_no_grad_path_same_output(inorm, gen, module, track):
    """A call that wants no gradient (no_grad, or nothing requiring one) skips the autograd Function:
    the same output, bit for bit, as the recording path, and no grad_fn; the recording path still
    records, in train and eval mode, for each input that may want a gradient. (Train-mode output
    does not depend on the running statistics the calls move; eval mode does not move them.)"""
    kwargs = {"activation": "leaky_relu"} if module == "InstanceNormAct2d" else {}
    m = getattr(inorm, module)(6, affine=True, track_running_stats=track, **kwargs).cuda()
    for mode in (True, False):
        m.train(mode)
        x = torch.randn(2, 6, 9, 11, device="cuda", generator=gen)
        with torch.no_grad():
            m.weight.normal_(generator=gen)
            quiet = m(x)
        assert quiet.grad_fn is None and not quiet.requires_grad
        for wanting in ("x", "weight"):
            xi = x.clone().requires_grad_(wanting == "x")
            m.weight.requires_grad_(wanting == "weight")
            m.bias.requires_grad_(False)
            y = m(xi)
            assert y.grad_fn is not None, f"{module} train={mode} track={track} {wanting}: no grad_fn"
            assert torch.equal(y.detach(), quiet), f"{module} train={mode} track={track} {wanting}: output differs"
            with torch.no_grad():
                assert m(xi).grad_fn is None
            (g,) = torch.autograd.grad(y.sum(), [xi if wanting == "x" else m.weight])
            assert torch.isfinite(g).all()
        m.weight.requires_grad_(True)
        m.bias.requires_grad_(True)
