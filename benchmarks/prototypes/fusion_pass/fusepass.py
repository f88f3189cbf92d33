"""Sketch of the pre-grad fusion pass (toy ops). Rewrites, in the Dynamo graph (before AOTAutograd),
    y, stats = norm(x, w, b, eps); z = act(y) [; z = z + r]
into
    z, stats = fused(x, w, b, r, eps, act, slope)
so that AOTAutograd traces the fused op's own autograd formula (fused forward AND fused backward)."""
import hashlib
import operator
import torch
import torch.nn.functional as F
from torch._inductor import config as inductor_config
from torch._inductor.custom_graph_pass import CustomGraphPass
from torch.fx.experimental.symbolic_shapes import statically_known_true

UUID_INCLUDES_SWITCH = True   # E5 flips this to show the stale-cache pitfall on 2.14
ENABLED = True          # the documented switch (the real module would also read an env var)
STATS = {"fired": 0}    # for tests: how many pairs were replaced

NORM_TARGETS = lambda: (torch.ops.toy.norm, torch.ops.toy.norm.default)   # packet AND overload
FUSED = lambda: torch.ops.toy.fused.default
IDENTITY, RELU, LEAKY, SILU, GELU, GELU_TANH = range(6)


def _arg(node, i, name, default):
    if len(node.args) > i:
        return node.args[i]
    return node.kwargs.get(name, default)


def _activation(node):
    """(act code, slope) if `node` is a supported activation applied to its first argument."""
    t = node.target
    if node.op == "call_function":
        if t in (F.relu, torch.relu, torch.relu_, F.relu_):
            return RELU, 0.0
        if t in (F.leaky_relu, torch._C._nn.leaky_relu, torch._C._nn.leaky_relu_, getattr(F, "leaky_relu_", None)):
            slope = _const_float(_arg(node, 1, "negative_slope", 0.01))
            return None if slope is None else (LEAKY, slope)
        if t in (F.silu, torch._C._nn.silu, torch._C._nn.silu_):
            return SILU, 0.0
        if t in (F.gelu, torch._C._nn.gelu):
            approx = _arg(node, 1, "approximate", "none")
            return {"none": (GELU, 0.0), "tanh": (GELU_TANH, 0.0)}.get(approx)
    elif node.op == "call_method":
        if t in ("relu", "relu_"):
            return RELU, 0.0
    elif node.op == "call_module":   # torch._dynamo.config.inline_inbuilt_nn_modules=False (2.11 keeps modules)
        mod = node.graph.owning_module.get_submodule(node.target)
        if type(mod) is torch.nn.ReLU:
            return RELU, 0.0
        if type(mod) is torch.nn.LeakyReLU:
            return LEAKY, float(mod.negative_slope)
        if type(mod) is torch.nn.SiLU:
            return SILU, 0.0
        if type(mod) is torch.nn.GELU:
            return {"none": (GELU, 0.0), "tanh": (GELU_TANH, 0.0)}.get(mod.approximate)
    return None


def _residual(node, y):
    """The other operand if `node` is `y + r` (any spelling, no alpha) with r of y's shape, dtype, device."""
    if node.op == "call_function" and node.target in (operator.add, operator.iadd, torch.add):
        pass
    elif node.op == "call_method" and node.target == "add":
        pass
    else:
        return None
    if set(node.kwargs) - {"alpha"} or node.kwargs.get("alpha", 1) != 1 or len(node.args) != 2:
        return None                   # alpha != 1, out=...: not ours
    a, b = node.args
    if node.target is operator.iadd and a is not y:
        return None                   # `r += y` writes r in place: r must keep being written
    r = b if a is y else a if b is y else None
    if not isinstance(r, torch.fx.Node) or r is y:
        return None
    vy, vr = y.meta.get("example_value"), r.meta.get("example_value")
    if not (isinstance(vy, torch.Tensor) and isinstance(vr, torch.Tensor)):
        return None
    if vy.dtype != vr.dtype or vy.device != vr.device or vy.dim() != vr.dim():
        return None
    # no broadcasting; symbolic sizes compared without adding guards
    if not all(statically_known_true(p == q) for p, q in zip(vy.shape, vr.shape)):
        return None
    return r


def _const_float(v):
    """A Python float for a float argument; under dynamic=True a float module attribute arrives as a
    graph input (SymFloat from .item()): specialize it with a guard so Dynamo recompiles if it changes
    (passing the SymFloat on is wrong on 2.11 with the caches on: see E4)."""
    if isinstance(v, (int, float)):
        return float(v)
    ev = v.meta.get("example_value") if isinstance(v, torch.fx.Node) else v
    if isinstance(ev, torch.SymFloat):
        from torch.fx.experimental.symbolic_shapes import guard_float
        return guard_float(ev)
    return None


def _only_user(node):
    return next(iter(node.users)) if len(node.users) == 1 else None


_INPLACE_OPERATORS = {operator.iadd, operator.isub, operator.imul, operator.itruediv, operator.setitem}


def _may_mutate(node):
    """Conservative: could `node` write to some tensor (pre-grad IR is not functional)?"""
    if node.op == "call_method":
        return node.target.endswith("_") and not node.target.endswith("__")
    if node.op != "call_function":
        return node.op == "call_module"
    t = node.target
    if t in _INPLACE_OPERATORS or node.kwargs.get("inplace") is True:
        return True
    if isinstance(t, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        ops = [t] if isinstance(t, torch._ops.OpOverload) else [getattr(t, o) for o in t.overloads()]
        return any(o._schema.is_mutable for o in ops)
    name = getattr(t, "__name__", "")
    return name.endswith("_") and not name.endswith("__")


def fuse(graph: torch.fx.Graph) -> int:
    count = 0
    for norm in list(graph.nodes):
        if norm.op != "call_function" or norm.target not in NORM_TARGETS():
            continue
        if not all(u.op == "call_function" and u.target is operator.getitem for u in norm.users):
            continue
        y_nodes = [u for u in norm.users if u.args[1] == 0]
        if len(y_nodes) != 1:
            continue
        y = y_nodes[0]
        user = _only_user(y)            # "the intermediate has no other user"
        if user is None:
            continue
        act, slope, act_node, add_node, residual = IDENTITY, 0.0, None, None, None
        a = _activation(user) if user.args and user.args[0] is y else None
        if a is not None:
            (act, slope), act_node = a, user
            nxt = _only_user(user)
            if nxt is not None and (r := _residual(nxt, user)) is not None:
                add_node, residual = nxt, r
        elif (r := _residual(user, y)) is not None:
            add_node, residual = user, r
        else:
            continue
        stats_users = [s for u in norm.users if u is not y for s in u.users]
        if add_node is not None:
            # The fused op goes just before the add (where r is read) and computes the norm there:
            # refuse the residual when anything in between may write a tensor, or uses the stats.
            order = {n: i for i, n in enumerate(graph.nodes)}
            between = [n for n in graph.nodes if order[norm] < order[n] < order[add_node] and n is not act_node]
            if any(_may_mutate(n) for n in between) or any(order[s] < order[add_node] for s in stats_users):
                add_node, residual = None, None
                if act_node is None:
                    continue
        last = add_node or act_node
        anchor = add_node if add_node is not None else norm
        x, w, b, eps = (_arg(norm, i, n, None) for i, n in enumerate(("x", "weight", "bias", "eps")))
        eps = _const_float(eps)
        if eps is None:
            continue
        with graph.inserting_before(anchor):
            fused = graph.call_function(FUSED(), (x, w, b, residual, eps, act, slope))
            z = graph.call_function(operator.getitem, (fused, 0))
            s = graph.call_function(operator.getitem, (fused, 1))
        fused.meta.update(norm.meta)          # stack trace, nn_module_stack, example_value (same shapes)
        z.meta.update(last.meta)
        last.replace_all_uses_with(z)
        for u in [u for u in norm.users if u is not y]:
            s.meta.update(u.meta)
            u.replace_all_uses_with(s)
        for n in [last] + [n for n in (act_node, y) if n is not None and n is not last]:
            graph.erase_node(n)               # consumers before producers
        for u in [u for u in norm.users]:
            graph.erase_node(u)
        graph.erase_node(norm)
        if not s.users:
            graph.erase_node(s)
        count += 1
    if count:
        graph.lint()
    STATS["fired"] += count
    return count


def _uuid_of(p):
    if p is None:
        return ""
    if isinstance(p, (list, tuple)):
        parts = [_uuid_of(q) for q in p]
        return None if any(q is None for q in parts) else "|".join(parts)
    u = p.uuid() if isinstance(p, CustomGraphPass) else None
    return None if u is None else repr(u)


class FusionPass(CustomGraphPass):
    """Our pass, chained after whatever pre_grad_custom_pass the user had set."""

    def __init__(self, chained=None):
        self.chained = chained

    def __call__(self, graph):
        for p in (self.chained if isinstance(self.chained, (list, tuple)) else [self.chained]):
            if p is not None:
                p(graph)
        if ENABLED:
            fuse(graph)

    def uuid(self):
        chained = _uuid_of(self.chained)
        if chained is None:
            return None          # a user pass without uuid: let Inductor bypass/early-run as it would
        with open(__file__, "rb") as f:
            src = f.read()
        return hashlib.sha256(src + repr((ENABLED if UUID_INCLUDES_SWITCH else None, chained)).encode()).hexdigest()


def install():
    """Put our pass on torch._inductor.config.pre_grad_custom_pass, chaining the one already there."""
    cur = inductor_config.pre_grad_custom_pass
    if isinstance(cur, FusionPass):
        return cur
    inductor_config.pre_grad_custom_pass = FusionPass(cur)
    return inductor_config.pre_grad_custom_pass
