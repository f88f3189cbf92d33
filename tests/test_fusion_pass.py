"""The norm + activation (+ residual) fusion (CPU only; design: benchmarks/DESIGN_fusion_pass.md).

* fuse_graph on Dynamo graphs captured by a custom backend: every activation spelling, the
  residual add in every spelling (after forward, into fused_forward; after eval_forward, eval mode
  with running statistics, into its own epilogue; after an op that already has its activation,
  InstanceNormAct2d's, into its residual), the refusals (other users, broadcast, alpha,
  `r += y`, mutations and stats users between the norm and the add), update_running_stats between
  norm and activation, floats that Dynamo turns into SymFloat graph inputs under dynamic=True.
  Each case runs twice:
  - "stub": a torch.library stub of the four ops with plain-PyTorch CPU kernels, so the rewritten
    graph is also run and compared with the unfused function (outputs, stats, mutated buffers);
  - "extension": this file's real ops on meta tensors (their Meta kernels), counts only; skipped
    until the extension has fused_forward.
* FusionPass: chaining (the user's pass first), the switch, uuid(); install_fusion_pass idempotence;
  one end-to-end torch.compile through Inductor on CPU with the stub ops.
* fuse_activations: the eager module rewrite (types, shared tensors, state_dict keys, outputs).
"""

import copy
import operator
import os
import types

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ACTIVATIONS = ("identity", "relu", "leaky_relu", "silu", "gelu", "gelu_tanh")
STUB_NS = "instance_norm_fusion_test_stub"


# =========================================================================== the module under test

def _act(t, name, slope):
    return {
        "identity": lambda: t,
        "relu": lambda: F.relu(t),
        "leaky_relu": lambda: F.leaky_relu(t, slope),
        "silu": lambda: F.silu(t),
        "gelu": lambda: F.gelu(t),
        "gelu_tanh": lambda: F.gelu(t, approximate="tanh"),
    }[name]()


@pytest.fixture(scope="module")
def fusion():
    import instance_norm

    return instance_norm


# =========================================================================== the stub ops

_STUB_LIBRARY = []


def _stub_norm(x, w, b, eps, stats=True):
    mean = x.mean(dim=(2, 3), keepdim=True)
    rstd = (x.var(dim=(2, 3), keepdim=True, unbiased=False) + eps).rsqrt()
    y = (x - mean) * rstd
    if w is not None:
        y = y * w.view(1, -1, 1, 1)
    if b is not None:
        y = y + b.view(1, -1, 1, 1)
    return y, torch.stack([mean.flatten(), rstd.flatten()]) if stats else x.new_empty(0)


def _check_residual(x, r):  # as the extension's ops: no broadcasting (a wrong-rank r must not slip by)
    if r is not None and r.shape != x.shape:
        raise RuntimeError(f"stub: residual {tuple(r.shape)} is not the input's {tuple(x.shape)}")


def _stub_fused(x, w, b, r, eps, act, slope, stats=True):
    _check_residual(x, r)
    y, stats = _stub_norm(x, w, b, eps, stats)
    y = _act(y, ACTIVATIONS[act], slope)
    return (y if r is None else y + r), stats


def _stub_update(stats, running_mean, running_var, batch, count, momentum, eps):
    mean, rstd = stats[0].view(batch, -1), stats[1].view(batch, -1)
    var = (rstd.pow(-2) - eps) * count / max(count - 1, 1)
    running_mean.mul_(1 - momentum).add_(mean.mean(0) * momentum)
    running_var.mul_(1 - momentum).add_(var.mean(0) * momentum)


def _stub_eval(x, running_mean, running_var, w, b, eps, residual=None, act=0, slope=0.0):
    _check_residual(x, residual)
    y = (x - running_mean.view(1, -1, 1, 1)) * (running_var.view(1, -1, 1, 1) + eps).rsqrt()
    if w is not None:
        y = y * w.view(1, -1, 1, 1)
    if b is not None:
        y = y + b.view(1, -1, 1, 1)
    y = _act(y, ACTIVATIONS[act], slope)
    return y if residual is None else y + residual


def _stub_meta(x, *args):
    stats = args[-1] if args and isinstance(args[-1], bool) else True  # the ops' last argument, as the extension's
    return torch.empty_like(x), x.new_empty((2, x.shape[0] * x.shape[1]) if stats else (0,))


def stub_ops():
    """The four ops with the extension's schemas, CPU kernels in plain PyTorch, Meta kernels."""
    if not _STUB_LIBRARY:
        lib = torch.library.Library(STUB_NS, "DEF")
        lib.define("forward(Tensor x, Tensor? weight, Tensor? bias, float eps, bool stats=True) -> (Tensor, Tensor)")
        lib.define("fused_forward(Tensor x, Tensor? weight, Tensor? bias, Tensor? residual, float eps, "
                   "int act, float slope, bool stats=True) -> (Tensor, Tensor)")
        lib.define("update_running_stats(Tensor stats, Tensor(a!) running_mean, Tensor(b!) running_var, "
                   "int batch, int count, float momentum, float eps) -> ()")
        lib.define("eval_forward(Tensor x, Tensor running_mean, Tensor running_var, Tensor? weight, Tensor? bias, "
                   "float eps, Tensor? residual=None, int act=0, float slope=0.0) -> Tensor")
        for name, cpu, meta in (("forward", _stub_norm, _stub_meta), ("fused_forward", _stub_fused, _stub_meta),
                                ("update_running_stats", _stub_update, lambda *a: None),
                                ("eval_forward", _stub_eval, lambda x, *a: torch.empty_like(x))):
            lib.impl(name, cpu, "CPU")
            lib.impl(name, meta, "Meta")
        _STUB_LIBRARY.append(lib)
    return getattr(torch.ops, STUB_NS)


@pytest.fixture(params=["stub", "extension"])
def env(request, monkeypatch):
    """ops, the device to trace on, and whether the rewritten graph's results can be compared."""
    if request.param == "stub":
        return types.SimpleNamespace(ops=stub_ops(), device="cpu", numerics=True)
    import instance_norm
    from torch.utils.cpp_extension import CUDA_HOME

    if instance_norm._ops is None and CUDA_HOME is None:
        pytest.skip("no CUDA toolkit to build the extension")
    if not torch.cuda.is_available() and not os.environ.get("TORCH_CUDA_ARCH_LIST"):
        monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "8.0;9.0")  # as CI and test_cpu: no GPU to ask
    ops = instance_norm.load_extension()
    if not hasattr(ops, "fused_forward"):
        pytest.skip("the extension has no fused_forward op yet (stub tests cover the rewrite)")
    return types.SimpleNamespace(ops=ops, device="meta", numerics=False)


# =========================================================================== helpers

class Capture:
    """torch.compile backend: runs fuse_graph on Dynamo's graph, keeps the final graphs."""

    def __init__(self, fusion, ops):
        self.fusion, self.ops, self.graphs, self.rewrites, self.symfloats = fusion, ops, [], 0, 0

    def __call__(self, gm, example_inputs):
        self.symfloats += sum(isinstance(n.meta.get("example_value"), torch.SymFloat) for n in gm.graph.nodes)
        self.rewrites += self.fusion.fuse_graph(gm.graph, self.ops)
        gm.recompile()
        self.graphs.append(gm)
        return gm.forward

    def nodes(self, target):
        return [n for gm in self.graphs for n in gm.graph.nodes if n.op != "output" and n.target in target]

    def fused(self):
        return self.nodes((self.ops.fused_forward.default,))

    def unfused(self):
        return self.nodes((self.ops.forward, self.ops.forward.default))

    def evals(self):
        return self.nodes((self.ops.eval_forward, self.ops.eval_forward.default))


def inputs(env, n=2, c=3, h=5, w=4, count=2):
    return [torch.randn(n, c, h, w, device=env.device, dtype=torch.float64) for _ in range(count)]


def clone(args):
    return [a.clone() if isinstance(a, torch.Tensor) else a for a in args]


def run(fusion, env, fn, args, dynamic=False):
    """Compile fn with the capturing backend, run it (cap.out: what it returned); with the stub,
    compare everything fn returns and every tensor argument (mutations) with the uncompiled fn."""
    torch._dynamo.reset()
    cap = Capture(fusion, env.ops)
    eager_args, compiled_args = clone(args), clone(args)
    out = cap.out = torch.compile(fn, backend=cap, dynamic=dynamic, fullgraph=True)(*compiled_args)
    if env.numerics:
        ref = fn(*eager_args)
        torch.testing.assert_close(out, ref)
        torch.testing.assert_close(compiled_args, eager_args)  # in-place writes happened the same
    return cap


def add_nodes(cap):
    return [n for gm in cap.graphs for n in gm.graph.nodes
            if n.target in (operator.add, operator.iadd, torch.add, "add", "add_")]


# =========================================================================== activations

LEAKY = nn.LeakyReLU(0.2)
ACTIVATION_FORMS = {
    # name: (callable on the norm output, activation, slope)
    "F.relu": (F.relu, "relu", 0.0),
    "F.relu(inplace)": (lambda t: F.relu(t, inplace=True), "relu", 0.0),
    "F.relu_": (F.relu_, "relu", 0.0),
    "torch.relu": (torch.relu, "relu", 0.0),
    "torch.relu_": (torch.relu_, "relu", 0.0),
    "Tensor.relu": (lambda t: t.relu(), "relu", 0.0),
    "Tensor.relu_": (lambda t: t.relu_(), "relu", 0.0),
    "nn.ReLU": (nn.ReLU(), "relu", 0.0),
    "nn.ReLU(inplace)": (nn.ReLU(inplace=True), "relu", 0.0),
    "F.leaky_relu": (F.leaky_relu, "leaky_relu", 0.01),
    "F.leaky_relu(0.1)": (lambda t: F.leaky_relu(t, 0.1), "leaky_relu", 0.1),
    "F.leaky_relu(kw, inplace)": (lambda t: F.leaky_relu(t, negative_slope=0.3, inplace=True), "leaky_relu", 0.3),
    "F.leaky_relu_": (lambda t: F.leaky_relu_(t, 0.05), "leaky_relu", 0.05),
    "nn.LeakyReLU(0.2)": (LEAKY, "leaky_relu", 0.2),
    "nn.LeakyReLU(inplace)": (nn.LeakyReLU(0.25, inplace=True), "leaky_relu", 0.25),
    "F.silu": (F.silu, "silu", 0.0),
    "F.silu(inplace)": (lambda t: F.silu(t, inplace=True), "silu", 0.0),
    "nn.SiLU": (nn.SiLU(), "silu", 0.0),
    "F.gelu": (F.gelu, "gelu", 0.0),
    "F.gelu(tanh)": (lambda t: F.gelu(t, approximate="tanh"), "gelu_tanh", 0.0),
    "nn.GELU": (nn.GELU(), "gelu", 0.0),
    "nn.GELU(tanh)": (nn.GELU("tanh"), "gelu_tanh", 0.0),
}


def fused_args(node):
    x, w, b, r, eps, act, slope, *stats = node.args
    return types.SimpleNamespace(x=x, w=w, b=b, r=r, eps=eps, act=ACTIVATIONS[act], slope=slope,
                                 stats=stats[0] if stats else True)


def eval_args(node):
    """eval_forward's arguments by name, its defaults filled in."""
    x, mean, var, w, b, eps, *rest = node.args
    r, act, slope = (list(rest) + [None, 0, 0.0][len(rest):])[:3]
    return types.SimpleNamespace(x=x, mean=mean, var=var, w=w, b=b, eps=eps, r=r, act=ACTIVATIONS[act], slope=slope)


def norm_inputs(env, c=3):
    """x, r, running_mean, running_var, weight, bias."""
    x, r = inputs(env, c=c)
    mean, w, b = (torch.randn(c, device=env.device, dtype=x.dtype) for _ in range(3))
    var = torch.rand(c, device=env.device, dtype=x.dtype) + 0.5
    return [x, r, mean, var, w, b]


def the_norm(cap, mode):
    """The one norm node a capture holds (fused_forward in train mode, eval_forward in eval), its
    arguments by name."""
    if mode == "train":
        assert not cap.unfused()
        (node,) = cap.fused()
        return fused_args(node)
    (node,) = cap.evals()
    return eval_args(node)


LEAKY_CODE = ACTIVATIONS.index("leaky_relu")
MODES = ["train", "eval"]  # forward -> fused_forward; eval_forward (running statistics) -> eval_forward


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("form", sorted(ACTIVATION_FORMS))
def test_activation_forms(fusion, env, form, mode):
    act, name, slope = ACTIVATION_FORMS[form]
    ops = env.ops

    def fn(x, r, mean, var, w, b):
        if mode == "eval":
            return act(ops.eval_forward(x, mean, var, w, b, 1e-5))
        y, stats = ops.forward(x, w, b, 1e-5)
        return act(y), stats

    cap = run(fusion, env, fn, norm_inputs(env))
    got = the_norm(cap, mode)
    assert (got.act, got.r, got.eps) == (name, None, 1e-5)
    assert got.slope == pytest.approx(slope)
    assert cap.rewrites == 1


def test_stats_flag_carried(fusion, env):
    """forward(..., stats=False) (what a module with no running statistics passes) fuses into a
    fused_forward that keeps stats=False; the default stays out of the call."""
    ops = env.ops

    def fn(x, other):
        y, stats = ops.forward(x, None, None, 1e-5, False)
        z, stats2 = ops.forward(other, None, None, 1e-5)
        return F.relu(y), F.silu(z), stats2

    x, y = inputs(env)
    cap = run(fusion, env, fn, [x, y])
    got = sorted((fused_args(n).act, fused_args(n).stats, len(n.args)) for n in cap.fused())
    assert got == [("relu", False, 8), ("silu", True, 7)]


def test_module_call_form(fusion, env):
    """A call_module activation (Dynamo keeps modules on 2.11 with inline_inbuilt_nn_modules=False),
    here from torch.fx.symbolic_trace, which keeps nn activations as leaf modules."""
    ops = env.ops

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.act = nn.LeakyReLU(0.3)

        def forward(self, x):
            return self.act(ops.forward(x, None, None, 1e-5)[0])

    gm = torch.fx.symbolic_trace(Block())
    assert any(n.op == "call_module" for n in gm.graph.nodes)
    assert fusion.fuse_graph(gm.graph, ops) == 1
    gm.recompile()
    (node,) = [n for n in gm.graph.nodes if n.target == ops.fused_forward.default]
    assert (fused_args(node).act, fused_args(node).slope) == ("leaky_relu", 0.3)
    if env.numerics:
        x = inputs(env, count=1)[0]
        torch.testing.assert_close(gm(x), Block()(x))


@pytest.mark.parametrize("form", ["tanh", "sigmoid", "hardtanh", "relu6", "leaky then scaled"])
def test_unsupported_activation(fusion, env, form):
    ops = env.ops
    act = {"tanh": torch.tanh, "sigmoid": torch.sigmoid, "hardtanh": F.hardtanh, "relu6": nn.ReLU6(),
           "leaky then scaled": lambda t: F.leaky_relu(t, 0.1) * 2}[form]

    def fn(x, r):
        return act(ops.forward(x, None, None, 1e-5)[0]) + r

    cap = run(fusion, env, fn, inputs(env))
    fused = form == "leaky then scaled"  # the activation fuses, the add (after the scaling) does not
    assert len(cap.fused()) == fused and len(cap.unfused()) == (not fused)
    assert len(add_nodes(cap)) == 1


# =========================================================================== residual adds

def iadd_into_y(y, r):
    y += r
    return y


def iadd_into_r(y, r):
    r += y
    return r


RESIDUAL_FORMS = {
    "y + r": lambda y, r: y + r,
    "r + y": lambda y, r: r + y,
    "torch.add(y, r)": lambda y, r: torch.add(y, r),
    "torch.add(r, y)": lambda y, r: torch.add(r, y),
    "torch.add(alpha=1)": lambda y, r: torch.add(y, r, alpha=1),
    "y.add(r)": lambda y, r: y.add(r),
    "y += r": iadd_into_y,
    "y.add_(r)": lambda y, r: y.add_(r),
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("with_act", [True, False], ids=["relu", "identity"])
@pytest.mark.parametrize("form", sorted(RESIDUAL_FORMS))
def test_residual_forms(fusion, env, form, with_act, mode):
    ops, add = env.ops, RESIDUAL_FORMS[form]

    def fn(x, r, mean, var, w, b):
        y = ops.forward(x, None, None, 1e-5)[0] if mode == "train" else ops.eval_forward(x, mean, var, w, b, 1e-5)
        return add(F.relu(y) if with_act else y, r)

    cap = run(fusion, env, fn, norm_inputs(env))
    got = the_norm(cap, mode)
    assert got.act == ("relu" if with_act else "identity")
    assert got.r is not None and got.r.op == "placeholder"
    assert not add_nodes(cap)


def act_norm(ops, mode, x, mean, var, w, b, r=None, act="leaky_relu", slope=0.2, stats=True):
    """InstanceNormAct2d's call: the op with its activation already in the epilogue."""
    code = ACTIVATIONS.index(act)
    if mode == "train":
        tail = () if stats is True else (stats,)
        return ops.fused_forward(x, w, b, r, 1e-5, code, slope, *tail)[0]
    return ops.eval_forward(x, mean, var, w, b, 1e-5, r, code, slope)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("form", sorted(RESIDUAL_FORMS))
def test_residual_after_fused_activation(fusion, env, form, mode):
    """An add after an op that already applies its activation (InstanceNormAct2d's call) fuses as its
    residual, in every spelling; the activation and its slope stay."""
    ops, add = env.ops, RESIDUAL_FORMS[form]

    def fn(x, r, mean, var, w, b):
        return add(act_norm(ops, mode, x, mean, var, w, b), r)

    cap = run(fusion, env, fn, norm_inputs(env))
    got = the_norm(cap, mode)
    assert (got.act, got.eps) == ("leaky_relu", 1e-5) and got.slope == pytest.approx(0.2)
    assert got.r is not None and got.r.op == "placeholder"
    assert not add_nodes(cap) and cap.rewrites == 1


@pytest.mark.parametrize("mode", MODES)
def test_after_fused_activation_refusals(fusion, env, mode):
    """Left alone after an op that already has its activation: a second activation (the epilogue adds
    the residual after the activation, and holds one activation), an add when the op already has a
    residual, the refused add forms, the intermediate read twice. stats=False passes on."""
    ops = env.ops

    def second_act(x, r, mean, var, w, b):
        return F.relu(act_norm(ops, mode, x, mean, var, w, b)) + r

    def has_residual(x, r, mean, var, w, b):
        return act_norm(ops, mode, x, mean, var, w, b, r=r) + r

    def broadcast(x, r, mean, var, w, b):
        return act_norm(ops, mode, x, mean, var, w, b) + r[:1, :, :1, :1]

    def r_written(x, r, mean, var, w, b):
        return iadd_into_r(act_norm(ops, mode, x, mean, var, w, b), r)

    def two_users(x, r, mean, var, w, b):
        y = act_norm(ops, mode, x, mean, var, w, b)
        return y + r, y

    for fn in (second_act, has_residual, broadcast, r_written, two_users):
        cap = run(fusion, env, fn, norm_inputs(env))
        assert cap.rewrites == 0 and len(add_nodes(cap)) == 1, fn.__name__
    if mode == "train":
        def no_stats(x, r, mean, var, w, b):
            return act_norm(ops, mode, x, mean, var, w, b, stats=False) + r

        cap = run(fusion, env, no_stats, norm_inputs(env))
        (node,) = cap.fused()
        assert cap.rewrites == 1 and fused_args(node).stats is False and fused_args(node).r is not None


@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
def test_module_graph_unbatched(fusion, env, training):
    """ModelNew's graph for unbatched input, as _forward builds it (x.unsqueeze(0), _run_kernels,
    .squeeze(0)), traced on meta tensors with the extension's ops: relu and + r fuse."""
    if env.device != "meta":
        pytest.skip("the module calls this file's ops: extension only")
    module = fusion.ModelNew(3, affine=True, track_running_stats=True, device="meta", dtype=torch.float64)
    module.train(training)

    def fn(x, r):
        return F.relu(module._run_kernels(x.unsqueeze(0), None, x.shape[1:].numel()).squeeze(0)) + r

    x, r = inputs(env)
    cap = run(fusion, env, fn, [x[0], r[0]])
    assert cap.rewrites == 1 and not add_nodes(cap) and not cap.unfused()
    got = fused_args(cap.fused()[0]) if training else eval_args(cap.evals()[0])
    assert got.act == "relu" and got.r is not None and cap.out.shape == x[0].shape


@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
def test_act_module_graph_takes_the_add(fusion, env, training):
    """InstanceNormAct2d's own graph (its _run_kernels traced on meta tensors with the extension's ops)
    followed by + r: the add fuses into its op, in training (update_running_stats in between) and in
    eval mode with running statistics."""
    if env.device != "meta":
        pytest.skip("the module calls this file's ops: extension only")
    module = fusion.InstanceNormAct2d(3, affine=True, track_running_stats=True, activation="silu", device="meta",
                                      dtype=torch.float64)
    module.train(training)

    def fn(x, r):
        return module._run_kernels(x, None, x.shape[2:].numel()) + r

    cap = run(fusion, env, fn, inputs(env))
    assert cap.rewrites == 1 and not add_nodes(cap) and not cap.unfused()
    got = fused_args(cap.fused()[0]) if training else eval_args(cap.evals()[0])
    assert (got.act, got.r.op) == ("silu", "placeholder")


UNBATCHED_TAILS = {  # what follows y.squeeze(0): (activation expected, residual expected)
    "relu": (lambda y, r: F.relu(y), "relu", False),
    "relu + r": (lambda y, r: F.relu(y) + r, "relu", True),
    "r + leaky_relu": (lambda y, r: r + F.leaky_relu(y, 0.1), "leaky_relu", True),
    "+ r": (lambda y, r: y + r, "identity", True),
}


@pytest.mark.parametrize("squeeze", ["method", "torch.squeeze"])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("tail", sorted(UNBATCHED_TAILS))
def test_unbatched_input(fusion, env, tail, mode, squeeze):
    """Unbatched (C, H, W) input: the modules run the op on x.unsqueeze(0) and return y.squeeze(0).
    The activation and the add after the squeeze fuse; the fused op takes r.unsqueeze(0) and its
    output is squeezed back (shape and strides as eager's)."""
    ops = env.ops
    combine, act, has_r = UNBATCHED_TAILS[tail]

    def fn(x, r, mean, var, w, b):
        xu = x.unsqueeze(0)
        y = ops.forward(xu, w, b, 1e-5)[0] if mode == "train" else ops.eval_forward(xu, mean, var, w, b, 1e-5)
        return combine(y.squeeze(0) if squeeze == "method" else torch.squeeze(y, 0), r)

    x, r, mean, var, w, b = norm_inputs(env)
    args = [x[0], r[0], mean, var, w, b]
    cap = run(fusion, env, fn, args)
    got = the_norm(cap, mode)
    assert (got.act, got.r is not None) == (act, has_r)
    assert not has_r or tuple(got.r.meta["example_value"].shape) == (1,) + tuple(args[0].shape)  # r.unsqueeze(0)
    assert not add_nodes(cap) and cap.rewrites == 1
    assert cap.out.shape == x[0].shape and cap.out.stride() == fn(*clone(args)).stride()


@pytest.mark.parametrize("mode", MODES)
def test_unbatched_refusals(fusion, env, mode):
    """Left alone: the squeezed output read twice, a squeeze of another dimension; a squeeze(0) of a
    batch of 2 (the identity) is not looked through."""
    ops = env.ops

    def norm(xu, mean, var, w, b):
        return ops.forward(xu, w, b, 1e-5)[0] if mode == "train" else ops.eval_forward(xu, mean, var, w, b, 1e-5)

    def two_users(x, r, mean, var, w, b):
        y = norm(x.unsqueeze(0), mean, var, w, b).squeeze(0)
        return F.relu(y), y

    def other_dim(x, r, mean, var, w, b):
        return F.relu(norm(x.unsqueeze(1), mean, var, w, b).squeeze(1))

    def batched(x, r, mean, var, w, b):  # squeeze(0) of a batch of 2 is the identity (r would go 5-D)
        return F.relu(norm(x, mean, var, w, b).squeeze(0)) + r

    for fn in (two_users, other_dim, batched):
        x, r, mean, var, w, b = norm_inputs(env)
        args = {two_users: [x[0], r[0], mean, var, w, b], other_dim: [x[:, 0], r, mean[:1], var[:1], w[:1], b[:1]],
                batched: [x, r, mean, var, w, b]}[fn]
        cap = run(fusion, env, fn, args)
        assert cap.rewrites == 0, fn.__name__


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("order", ["r + y", "y + r"])
def test_residual_keeps_the_layout(fusion, env, order, mode):
    """x channels-last, r contiguous: eager's sum takes the first operand's layout where they differ,
    the fused op always x's (as y does). So the add fuses only where the sum has y's strides (the
    activation fuses either way), and the compiled result has eager's strides: `r + relu(y)` is
    contiguous, and a later `.view(n, -1)` of it compiled (the fused op's channels-last output failed)."""
    ops = env.ops

    def norm(x, mean, var, w, b):
        return ops.forward(x, w, b, 1e-5)[0] if mode == "train" else ops.eval_forward(x, mean, var, w, b, 1e-5)

    def fn(x, r, mean, var, w, b):
        z = F.relu(norm(x, mean, var, w, b))
        return r + z if order == "r + y" else z + r

    args = norm_inputs(env, c=8)
    args[0] = args[0].contiguous(memory_format=torch.channels_last)
    x, r, mean, var, w, b = clone(args)
    y, out = norm(x, mean, var, w, b), fn(x, r, mean, var, w, b)
    cap = run(fusion, env, fn, args)
    got = the_norm(cap, mode)
    assert (got.act, got.r is not None) == ("relu", out.stride() == y.stride())
    assert cap.out.stride() == out.stride()
    if env.numerics:  # the stub's norm keeps x's layout at any shape: both cases happen
        assert (got.r is not None) == (order == "y + r")


RESIDUAL_REFUSALS = {
    # the add must stay: r is written in place, broadcast, alpha, dtype, scalars, y twice
    "r += y": iadd_into_r,
    "r.add_(y)": lambda y, r: r.add_(y),
    "broadcast r": lambda y, r: y + r[:1, :, :1, :1],
    "broadcast y": lambda y, r: y[:1] + r,
    "alpha=2": lambda y, r: torch.add(y, r, alpha=2),
    "other dtype": lambda y, r: y + r.float(),
    "scalar": lambda y, r: y + 1.5,
    "y + y": lambda y, r: y + y,
}


@pytest.mark.parametrize("with_act", [True, False], ids=["relu", "identity"])
@pytest.mark.parametrize("form", sorted(RESIDUAL_REFUSALS))
def test_residual_refused(fusion, env, form, with_act):
    ops, add = env.ops, RESIDUAL_REFUSALS[form]

    def fn(x, r):
        y = ops.forward(x, None, None, 1e-5)[0]
        out = add(F.relu(y) if with_act else y, r)
        return out, r  # r's in-place update must still happen

    cap = run(fusion, env, fn, inputs(env))
    assert len(add_nodes(cap)) == 1
    if with_act:
        (node,) = cap.fused()
        assert fused_args(node).r is None and fused_args(node).act == "relu"
    else:
        assert not cap.fused() and len(cap.unfused()) == 1


def test_intermediate_with_other_users(fusion, env):
    ops = env.ops

    def norm_twice(x, r):  # relu(y) + y: y has two users
        y = ops.forward(x, None, None, 1e-5)[0]
        return F.relu(y) + y

    def act_twice(x, r):  # the activation is fused, its output feeds two adds: the add stays
        z = F.silu(ops.forward(x, None, None, 1e-5)[0])
        return z + r, z * 2

    cap = run(fusion, env, norm_twice, inputs(env))
    assert not cap.fused() and len(cap.unfused()) == 1
    cap = run(fusion, env, act_twice, inputs(env))
    (node,) = cap.fused()
    assert fused_args(node).r is None and len(add_nodes(cap)) == 1


# =========================================================================== stats, mutations

def test_stats_user_after_add(fusion, env):
    ops = env.ops

    def fn(x, r):
        y, stats = ops.forward(x, None, None, 1e-5)
        return F.gelu(y) + r, stats * 2, stats.sum()

    cap = run(fusion, env, fn, inputs(env))
    (node,) = cap.fused()
    assert fused_args(node).r is not None and not add_nodes(cap)
    stats_reads = [n for n in node.users if n.args[1] == 1]
    assert len(stats_reads) == 1 and len(stats_reads[0].users) == 2


def test_stats_user_before_residual_is_made(fusion, env):
    """r is computed after the norm from the stats: the fused op cannot move before r, and at r's
    place the stats would be read before they exist: activation fused, add kept."""
    ops = env.ops

    def fn(x, r):
        y, stats = ops.forward(x, None, None, 1e-5)
        r2 = r * stats.mean()
        return F.relu(y) + r2

    cap = run(fusion, env, fn, inputs(env))
    (node,) = cap.fused()
    assert fused_args(node).r is None and len(add_nodes(cap)) == 1


def test_residual_made_after_norm(fusion, env):
    """r computed between the norm and the add: the fused op goes right after r."""
    ops = env.ops

    def fn(x, r):
        y, stats = ops.forward(x, None, None, 1e-5)
        z = F.relu(y)
        r2 = r.sin() * 3
        return z + r2, stats

    cap = run(fusion, env, fn, inputs(env))
    (node,) = cap.fused()
    assert fused_args(node).r.target == operator.mul and not add_nodes(cap)


POSITIONAL_INPLACE_WRITES = {
    "relu": lambda r: F.relu(r, True),
    "leaky_relu": lambda r: F.leaky_relu(r, 0.1, True),
    "dropout": lambda r: F.dropout(r, 0.0, True, True),  # p = 0: deterministic, still in place
}


@pytest.mark.parametrize("write", sorted(POSITIONAL_INPLACE_WRITES))
def test_positional_inplace_write_between(fusion, env, write):
    """An in-place call whose `inplace` comes positionally writes r between the norm and the add:
    the fused op must not read r before that write, so the residual is refused (found in review:
    an earlier version read r at the norm, 2.97 max error)."""
    ops = env.ops
    write_r = POSITIONAL_INPLACE_WRITES[write]

    def fn(x, r):
        y, stats = ops.forward(x, None, None, 1e-5)
        write_r(r)
        return F.relu(y) + r

    cap = run(fusion, env, fn, inputs(env))
    (node,) = cap.fused()
    assert fused_args(node).r is None and len(add_nodes(cap)) == 1


def running_stats_fn(ops, where):
    def fn(x, r, running_mean, running_var):
        y, stats = ops.forward(x, None, None, 1e-5)
        ops.update_running_stats(stats, running_mean, running_var, x.size(0), x.size(2) * x.size(3), 0.1, 1e-5)
        if where == "r made after the update":
            r = r * 2
        elif where == "a write between":
            r.mul_(2)
        return F.leaky_relu(y, 0.2) + r

    return fn


@pytest.mark.parametrize("where", ["r is an input", "r made after the update", "a write between"])
def test_update_running_stats_between(fusion, env, where):
    """ModelNew in training with track_running_stats calls update_running_stats between the norm and
    the activation; it writes only the running buffers, so the residual still fuses when r exists
    before the norm. Otherwise the residual is refused and the activation still fused."""
    x, r = inputs(env)
    running = [torch.zeros(3, device=env.device, dtype=x.dtype), torch.ones(3, device=env.device, dtype=x.dtype)]
    cap = run(fusion, env, running_stats_fn(env.ops, where), [x, r] + running)
    (node,) = cap.fused()
    assert (fused_args(node).r is not None) == (where == "r is an input")
    assert len(cap.nodes((env.ops.update_running_stats, env.ops.update_running_stats.default))) == 1


def test_update_running_stats_writing_the_residual(fusion):
    """If the residual is a tensor update_running_stats writes, the add stays (stub only: the
    "running mean" here has the input's shape, which the real op refuses)."""
    env = types.SimpleNamespace(ops=stub_ops(), device="cpu", numerics=True)
    ops = env.ops

    def fn(x, buffer, running_var):
        y, stats = ops.forward(x, None, None, 1e-5)
        ops.update_running_stats(stats, buffer, running_var, x.size(0), x.size(2) * x.size(3), 0.1, 1e-5)
        return F.relu(y) + buffer

    x, buffer = inputs(env, w=3)
    cap = run(fusion, env, fn, [x, buffer, torch.ones(3, dtype=x.dtype)])
    (node,) = cap.fused()
    assert fused_args(node).r is None and len(add_nodes(cap)) == 1


@pytest.mark.parametrize("fused_act", [False, True], ids=["forward", "act_op"])
def test_update_running_stats_writing_a_view_of_the_residual(fusion, fused_act):
    """update_running_stats writing a view of r between the norm and the add: the add stays (the
    moved op would read r before the write; found by review). Stub only, numerics compared."""
    env = types.SimpleNamespace(ops=stub_ops(), device="cpu", numerics=True)
    ops = env.ops

    def fn(x, r, running_var):
        if fused_act:
            y, stats = ops.fused_forward(x, None, None, None, 1e-5, ACTIVATIONS.index("relu"), 0.0)
        else:
            y, stats = ops.forward(x, None, None, 1e-5)
            y = F.relu(y)
        ops.update_running_stats(stats, r[0, 0, 0, :3], running_var, x.size(0), x.size(2) * x.size(3), 0.1, 1e-5)
        return y + r

    x, r = inputs(env)
    cap = run(fusion, env, fn, [x, r, torch.ones(3, dtype=x.dtype)])
    assert len(add_nodes(cap)) == 1 and all(fused_args(n).r is None for n in cap.fused())


@pytest.mark.parametrize("made_after", [False, True], ids=["r_input", "r_made_after"])
@pytest.mark.parametrize("mode", MODES)
def test_after_fused_activation_module_pattern(fusion, env, mode, made_after):
    """The module's pattern with numbers (stub), keyword calls, dynamic=True with the slope a module
    attribute (a SymFloat input): in training update_running_stats of the module's own buffers sits
    between the act op and the add. r as an input fuses in both modes; r made after the op fuses in
    eval (the op moves to right after r) and is refused in training (update_running_stats would read
    the op's statistics before they exist)."""
    ops = env.ops
    holder = nn.LeakyReLU(0.2)  # its negative_slope, a float attribute, becomes a SymFloat input

    def fn(x, r, mean, var, w, b):
        if mode == "train":
            # The act code a global, a constant as the module's int attribute arrives (a closure's int
            # becomes a SymInt input under dynamic=True, which the pass leaves unfused: no guard on it).
            y, stats = ops.fused_forward(x, weight=w, bias=b, residual=None, eps=1e-5, act=LEAKY_CODE,
                                         slope=holder.negative_slope)
            ops.update_running_stats(stats, mean, var, x.size(0), x.size(2) * x.size(3), 0.1, 1e-5)
        else:
            y = ops.eval_forward(x, mean, var, w, b, 1e-5, act=LEAKY_CODE, slope=holder.negative_slope)
        return y + (r * 2 if made_after else r)

    for slope in (0.2, 0.3):
        holder.negative_slope = slope
        cap = run(fusion, env, fn, norm_inputs(env), dynamic=True)
        if made_after and mode == "train":
            assert cap.rewrites == 0 and len(add_nodes(cap)) == 1
            continue
        got = the_norm(cap, mode)
        assert (got.act, got.slope, got.r is not None) == ("leaky_relu", slope, True) and isinstance(got.slope, float)
        assert (got.r.op == "placeholder") == (not made_after) and not add_nodes(cap) and cap.rewrites == 1


def test_grad_mode_and_autocast_between(fusion, env):
    """The fused op must not move an activation or an add across a grad-mode or autocast switch."""
    ops = env.ops

    def act_under_no_grad(x, r):
        y = ops.forward(x, None, None, 1e-5)[0]
        with torch.no_grad():
            return F.relu(y) + r

    def add_under_autocast(x, r):
        z = F.relu(ops.forward(x, None, None, 1e-5)[0])
        with torch.autocast(env.device if env.device != "meta" else "cpu"):
            return z + r

    cap = run(fusion, env, act_under_no_grad, inputs(env))
    assert not cap.fused() and len(cap.unfused()) == 1
    cap = run(fusion, env, add_under_autocast, inputs(env))
    (node,) = cap.fused()
    assert fused_args(node).r is None and len(add_nodes(cap)) == 1


# =========================================================================== floats under dynamic=True

def test_dynamic_slope_and_eps_are_specialized(fusion, env):
    """Dynamo turns float module attributes and float arguments into SymFloat graph inputs under
    dynamic=True; the pass specializes them (guard_float), so another value recompiles."""
    ops = env.ops
    leaky = nn.LeakyReLU(0.2)

    def fn(x, r, eps):
        return leaky(ops.forward(x, None, None, eps)[0]) + r

    x, r = inputs(env)
    cap = Capture(fusion, ops)
    torch._dynamo.reset()
    compiled = torch.compile(fn, backend=cap, dynamic=True, fullgraph=True)
    for slope, eps in ((0.2, 1e-5), (0.3, 1e-5), (0.3, 1e-3)):
        leaky.negative_slope = slope
        out = compiled(x, r, eps)
        node = cap.fused()[-1]
        assert (fused_args(node).slope, fused_args(node).eps) == (slope, eps)
        assert isinstance(fused_args(node).slope, float) and isinstance(fused_args(node).eps, float)
        if env.numerics:
            torch.testing.assert_close(out, fn(x, r, eps))
    assert cap.symfloats > 0, "Dynamo no longer makes SymFloat inputs here: the test lost its point"
    assert len(cap.graphs) == 3


# =========================================================================== eval mode (running statistics)

def test_eval_refusals(fusion, env):
    """Left alone: the intermediate read twice, an eval_forward that already has an epilogue (an
    activation, or a residual), and the add when r is written in place (the activation still fuses) or
    a running statistic is written between the norm and the add (by a tensor method or by
    update_running_stats; likewise)."""
    ops = env.ops

    def two_users(x, r, mean, var, w, b):
        y = ops.eval_forward(x, mean, var, w, b, 1e-5)
        return F.relu(y), y

    def already_fused(x, r, mean, var, w, b):
        return F.silu(ops.eval_forward(x, mean, var, w, b, 1e-5, None, ACTIVATIONS.index("relu"), 0.0))

    def r_written(x, r, mean, var, w, b):
        return iadd_into_r(F.relu(ops.eval_forward(x, mean, var, w, b, 1e-5)), r)

    def stats_written(x, r, mean, var, w, b):
        z = F.relu(ops.eval_forward(x, mean, var, w, b, 1e-5))
        mean.add_(1.0)
        return z + r

    def has_residual(x, r, mean, var, w, b):
        return F.relu(ops.eval_forward(x, mean, var, w, b, 1e-5, r)) + r

    def stats_updated(x, r, mean, var, w, b):  # a writer of the op's own running statistics in between
        z = F.relu(ops.eval_forward(x, mean, var, w, b, 1e-5))
        y, stats = ops.forward(r, None, None, 1e-5)
        ops.update_running_stats(stats, mean, var, r.size(0), r.size(2) * r.size(3), 0.1, 1e-5)
        return z + r, y

    cases = ((two_users, "identity", 0), (already_fused, "relu", 0), (r_written, "relu", 1),
             (stats_written, "relu", 2),  # stats_written's adds: mean.add_ and z + r
             (has_residual, "identity", 1), (stats_updated, "relu", 1))
    for fn, act, add in cases:
        cap = run(fusion, env, fn, norm_inputs(env))
        (node,) = cap.evals()
        r = eval_args(node).r
        assert (eval_args(node).act, r is None or fn is has_residual, len(add_nodes(cap))) == (act, True, add), \
            fn.__name__
        assert cap.rewrites == (fn in (r_written, stats_written, stats_updated)), fn.__name__


@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
def test_module_graph_fuses(fusion, env, training):
    """ModelNew's own graph (its _run_kernels traced on meta tensors with the extension's ops): relu
    and + r fuse in training (into fused_forward, update_running_stats in between) and in eval mode
    with running statistics (into eval_forward)."""
    if env.device != "meta":
        pytest.skip("the module calls this file's ops: extension only")
    module = fusion.ModelNew(3, affine=True, track_running_stats=True, device="meta", dtype=torch.float64)
    module.train(training)

    def fn(x, r):
        return F.relu(module._run_kernels(x, None, x.shape[2:].numel())) + r

    cap = run(fusion, env, fn, inputs(env))
    assert cap.rewrites == 1 and not add_nodes(cap) and not cap.unfused()
    if training:
        (node,) = cap.fused()
        assert (fused_args(node).act, fused_args(node).r.op) == ("relu", "placeholder")
    else:
        (node,) = cap.evals()
        assert (eval_args(node).act, eval_args(node).r.op) == ("relu", "placeholder")


def test_eval_residual_made_after_norm(fusion, env):
    """r computed after the norm: the rewritten eval_forward moves to right after r, which is
    still before any reader of the result."""
    ops = env.ops

    def fn(x, r, mean, var, w, b):
        y = ops.eval_forward(x, mean, var, w, b, 1e-5)
        r2 = r * 2
        return F.leaky_relu(y, 0.1) + r2

    cap = run(fusion, env, fn, norm_inputs(env))
    (node,) = cap.evals()
    got = eval_args(node)
    assert (got.act, got.slope) == ("leaky_relu", 0.1) and got.r is not None and got.r.op != "placeholder"
    assert not add_nodes(cap)


# =========================================================================== FusionPass, switch, install

class UserPass:
    """A user's pre-grad pass (a CustomGraphPass) that records whether it ran before the fusion."""

    def __init__(self, ops, uuid="user-v1"):
        from torch._inductor.custom_graph_pass import CustomGraphPass

        CustomGraphPass.register(UserPass)
        # names, not op objects: torch.compile deep-copies the Inductor config, passes included
        self.forward, self._uuid, self.saw_unfused = f"{ops.name}.forward", uuid, []

    def __call__(self, graph):
        self.saw_unfused.append(any(str(n.target) == self.forward for n in graph.nodes))

    def uuid(self):
        return self._uuid


def capture_graph(ops, device="cpu"):
    """A Dynamo graph (GraphModule) with one fusable norm + relu + residual."""
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    def fn(x, r):
        return F.relu(ops.forward(x, None, None, 1e-5)[0]) + r

    torch._dynamo.reset()
    torch.compile(fn, backend=backend, fullgraph=True)(*(torch.randn(2, 3, 4, 4, device=device) for _ in range(2)))
    return graphs[0]


def count_fused(ops, gm):
    return sum(n.target == ops.fused_forward.default for n in gm.graph.nodes)


@pytest.fixture
def restore_switch(fusion):
    previous = fusion.set_compile_fusion(True)
    yield
    fusion.set_compile_fusion(previous)


def test_chained_user_pass_runs_first(fusion, restore_switch):
    ops = stub_ops()
    users = [UserPass(ops), UserPass(ops, "user-v2")]
    for chained in (users[0], users):
        gm = capture_graph(ops)
        fusion.FusionPass(chained, ops=ops)(gm.graph)
        assert count_fused(ops, gm) == 1
    assert users[0].saw_unfused == [True, True] and users[1].saw_unfused == [True]
    plain = []
    gm = capture_graph(ops)
    fusion.FusionPass(lambda g: plain.append(len(g.nodes)), ops=ops)(gm.graph)  # a plain callable
    assert plain and count_fused(ops, gm) == 1


def test_switch_off_and_uuid(fusion, restore_switch):
    from torch._inductor.custom_graph_pass import CustomGraphPass

    ops = stub_ops()
    p = fusion.FusionPass(UserPass(ops), ops=ops)
    assert isinstance(p, CustomGraphPass)
    on = p.uuid()
    assert isinstance(on, str) and on == p.uuid()
    fusion.set_compile_fusion(False)
    assert not fusion.FusionPass(ops=ops).enabled
    p.enabled = False
    off = p.uuid()
    gm = capture_graph(ops)
    p(gm.graph)
    assert count_fused(ops, gm) == 0 and off != on
    p.enabled = True
    assert p.uuid() == on
    assert fusion.FusionPass(UserPass(ops, "user-v2"), ops=ops).uuid() != on  # chained uuids count
    assert fusion.FusionPass([UserPass(ops), UserPass(ops, "x")], ops=ops).uuid() not in (None, on)
    assert fusion.FusionPass(lambda g: None, ops=ops).uuid() is None  # no uuid: none of ours either
    assert fusion.FusionPass(UserPass(ops, None), ops=ops).uuid() is None
    assert fusion.FusionPass(UserPass(ops, ""), ops=ops).uuid() is None


def test_install_is_idempotent_and_chains(fusion, restore_switch):
    from torch._inductor import config

    ops = stub_ops()
    user = UserPass(ops)
    with config.patch(pre_grad_custom_pass=user):
        p = fusion.install_fusion_pass()
        assert config.pre_grad_custom_pass is p and p.chained is user
        assert fusion.install_fusion_pass() is p and config.pre_grad_custom_pass is p and p.chained is user
        fusion.set_compile_fusion(False)  # reaches the installed pass
        assert not p.enabled
        fusion.set_compile_fusion(True)
        assert p.enabled
        config.pre_grad_custom_pass = [user, p]  # a user list that already holds ours: left alone
        assert fusion.install_fusion_pass() is p and config.pre_grad_custom_pass == [user, p]
    with config.patch(pre_grad_custom_pass=None):
        p = fusion.install_fusion_pass()
        assert p.chained is None and fusion.install_fusion_pass() is p


def test_inductor_end_to_end(fusion, restore_switch):
    """torch.compile with Inductor (CPU, stub kernels): the user's pass and ours both run, the
    post-grad graph holds the fused op only, results match; switched off, the unfused op is back."""
    from torch._inductor import config

    ops = stub_ops()
    seen = []

    def observe(graph):
        seen.append([str(n.target) for n in graph.nodes if STUB_NS in str(n.target)])

    def fn(x, r):
        y, stats = ops.forward(x, None, None, 1e-5)
        return F.leaky_relu(y, 0.2) + r, stats

    x, r = (torch.randn(2, 3, 6, 5) for _ in range(2))
    user = UserPass(ops)
    for enabled, expected in ((True, "fused_forward.default"), (False, "forward.default")):
        fusion.set_compile_fusion(enabled)
        torch._dynamo.reset()
        seen.clear()
        with config.patch(pre_grad_custom_pass=user, post_grad_custom_post_pass=observe, fx_graph_cache=False), \
                torch._functorch.config.patch(enable_autograd_cache=False):
            fusion.install_fusion_pass().namespace = STUB_NS  # this file's pass, fusing the stub ops
            out = torch.compile(fn)(x, r)
        torch.testing.assert_close(out, fn(x, r))
        assert seen == [[f"{STUB_NS}.{expected}"]]
    assert user.saw_unfused == [True, True]


def test_inductor_end_to_end_eval(fusion, restore_switch):
    """The same for eval_forward: the post-grad graph's one eval_forward carries the activation and
    the residual; switched off, it carries neither."""
    from torch._inductor import config

    ops = stub_ops()
    seen = []

    def observe(graph):
        seen.extend(tuple(n.args[6:]) for n in graph.nodes if n.target is ops.eval_forward.default)

    def fn(x, r, mean, var):
        return F.leaky_relu(ops.eval_forward(x, mean, var, None, None, 1e-5), 0.2) + r

    x, r = (torch.randn(2, 3, 6, 5) for _ in range(2))
    mean, var = torch.randn(3), torch.rand(3) + 0.5
    for enabled in (True, False):
        fusion.set_compile_fusion(enabled)
        torch._dynamo.reset()
        seen.clear()
        with config.patch(pre_grad_custom_pass=None, post_grad_custom_post_pass=observe, fx_graph_cache=False), \
                torch._functorch.config.patch(enable_autograd_cache=False):
            fusion.install_fusion_pass().namespace = STUB_NS
            out = torch.compile(fn)(x, r, mean, var)
        torch.testing.assert_close(out, fn(x, r, mean, var))
        assert len(seen) == 1, seen
        residual, act, slope = (list(seen[0]) + [None, 0, 0.0][len(seen[0]):])[:3]
        assert (residual is not None, act, slope) == ((True, ACTIVATIONS.index("leaky_relu"), 0.2) if enabled
                                                      else (False, 0, 0.0)), seen


# =========================================================================== fuse_activations

def build_net(fusion):
    return nn.Sequential(
        nn.Conv2d(3, 4, 3, padding=1),
        nn.InstanceNorm2d(4, affine=True, track_running_stats=True),
        nn.ReLU(inplace=True),
        fusion.ModelNew(4, affine=True),
        nn.LeakyReLU(0.2),
        nn.Sequential(nn.InstanceNorm2d(4, eps=1e-3, momentum=None, track_running_stats=True), nn.SiLU()),
        nn.InstanceNorm2d(4),
        nn.GELU("tanh"),
        nn.InstanceNorm2d(4),
        nn.Tanh(),  # not supported: stays
        nn.InstanceNorm2d(4),
        nn.GELU(),
    )


def test_fuse_activations(fusion):
    net = build_net(fusion)
    with torch.no_grad():
        for m in net.modules():
            if isinstance(m, nn.InstanceNorm2d) and m.affine:
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.5, 0.5)
    reference = copy.deepcopy(net)
    tensors = {k: v for k, v in list(net.named_parameters()) + list(net.named_buffers())}
    keys = list(net.state_dict())
    assert fusion.fuse_activations(net) is net
    act2d = fusion.InstanceNormAct2d
    kinds = [type(m).__name__ for m in net]
    assert kinds == ["Conv2d", "InstanceNormAct2d", "Identity", "InstanceNormAct2d", "Identity", "Sequential",
                     "InstanceNormAct2d", "Identity", "InstanceNorm2d", "Tanh", "InstanceNormAct2d", "Identity"]
    assert [type(m) for m in net[5]] == [act2d, nn.Identity]
    assert list(net.state_dict()) == keys
    for k, v in list(net.named_parameters()) + list(net.named_buffers()):
        assert v is tensors[k], k  # the same Parameter / buffer objects
    assert (net[5][0].eps, net[5][0].momentum, net[5][0].track_running_stats) == (1e-3, None, True)
    x = torch.randn(2, 3, 6, 5)
    for mode in ("train", "eval", "train"):
        getattr(net, mode)()
        getattr(reference, mode)()
        torch.testing.assert_close(net(x), reference(x))
    torch.testing.assert_close(net.state_dict(), reference.state_dict())


def test_fuse_activations_leaves_alone(fusion):
    act2d = fusion.InstanceNormAct2d
    hooked = nn.InstanceNorm2d(4)
    hooked.register_forward_hook(lambda m, i, o: None)

    class CustomSequential(nn.Sequential):
        def forward(self, x):
            return x

    cases = [
        nn.Sequential(act2d(4, activation="relu"), nn.ReLU()),  # already fused
        nn.Sequential(nn.InstanceNorm1d(4), nn.ReLU()),
        nn.Sequential(nn.InstanceNorm3d(4), nn.ReLU()),
        nn.Sequential(nn.BatchNorm2d(4), nn.ReLU()),
        nn.Sequential(hooked, nn.ReLU()),
        nn.Sequential(nn.InstanceNorm2d(4), nn.ReLU6()),
        nn.Sequential(nn.ReLU(), nn.InstanceNorm2d(4)),
        CustomSequential(nn.InstanceNorm2d(4), nn.ReLU()),
    ]
    for net in cases:
        before = [type(m) for m in net]
        fusion.fuse_activations(net)
        assert [type(m) for m in net] == before
    net = nn.Sequential(nn.InstanceNorm2d(4), nn.ReLU(), nn.ReLU())  # the second ReLU stays
    fusion.fuse_activations(net)
    assert [type(m) for m in net] == [act2d, nn.Identity, nn.ReLU]
    bare = nn.InstanceNorm2d(4)
    assert fusion.fuse_activations(bare) is bare and type(bare) is nn.InstanceNorm2d
