"""Toy stand-ins (CPU) for the project's C++ custom ops: norm forward/backward and a fused
norm+activation(+residual) forward/backward, each with its own autograd formula."""
import math
import torch
import torch.nn.functional as F

CALLS = {"norm": 0, "fused": 0}  # run-time counters (cache hits skip compile-time hooks)
ACTS = {"identity": 0, "relu": 1, "leaky_relu": 2, "silu": 3, "gelu": 4, "gelu_tanh": 5}


def _norm(x, w, b, eps):
    mean = x.mean(dim=(2, 3), keepdim=True)
    var = x.var(dim=(2, 3), keepdim=True, unbiased=False)
    rstd = (var + eps).rsqrt()
    xhat = (x - mean) * rstd
    y = xhat
    if w is not None:
        y = y * w.view(1, -1, 1, 1)
    if b is not None:
        y = y + b.view(1, -1, 1, 1)
    return y, torch.stack([mean.flatten(), rstd.flatten()])  # stats (2, N*C)


def _act(z, act, slope):
    return [lambda t: t, F.relu, lambda t: F.leaky_relu(t, slope), F.silu, F.gelu,
            lambda t: F.gelu(t, approximate="tanh")][act](z)


def _norm_bwd_math(dy, x, w, stats):
    N, C = x.shape[:2]
    mean, rstd = (s.view(N, C, 1, 1) for s in stats)
    xhat = (x - mean) * rstd
    g = dy * w.view(1, -1, 1, 1) if w is not None else dy
    dx = rstd * (g - g.mean(dim=(2, 3), keepdim=True) - xhat * (g * xhat).mean(dim=(2, 3), keepdim=True))
    return dx, (dy * xhat).sum(dim=(0, 2, 3)), dy.sum(dim=(0, 2, 3))


def _act_grad(z, act, slope):
    if act == 0:
        return torch.ones_like(z)
    if act == 1:
        return (z > 0).to(z.dtype)
    if act == 2:
        return torch.where(z > 0, 1.0, slope).to(z.dtype)
    if act == 3:
        s = torch.sigmoid(z)
        return s * (1 + z * (1 - s))
    if act == 4:
        return 0.5 * (1 + torch.erf(z / math.sqrt(2))) + z * torch.exp(-0.5 * z * z) / math.sqrt(2 * math.pi)
    k = math.sqrt(2 / math.pi)
    u = k * (z + 0.044715 * z ** 3)
    t = torch.tanh(u)
    return 0.5 * (1 + t) + 0.5 * z * (1 - t * t) * k * (1 + 3 * 0.044715 * z * z)


@torch.library.custom_op("toy::norm", mutates_args=())
def norm(x: torch.Tensor, w: torch.Tensor | None, b: torch.Tensor | None, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    CALLS["norm"] += 1
    return _norm(x, w, b, eps)


@norm.register_fake
def _(x, w, b, eps):
    return torch.empty_like(x), x.new_empty(2, x.shape[0] * x.shape[1])


@torch.library.custom_op("toy::norm_bwd", mutates_args=())
def norm_bwd(dy: torch.Tensor, x: torch.Tensor, w: torch.Tensor | None, stats: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return _norm_bwd_math(dy, x, w, stats)


@norm_bwd.register_fake
def _(dy, x, w, stats):
    return torch.empty_like(x), x.new_empty(x.shape[1]), x.new_empty(x.shape[1])


def _norm_setup(ctx, inputs, output):
    x, w, b, eps = inputs
    ctx.save_for_backward(x, w, output[1])
    ctx.has_w, ctx.has_b = w is not None, b is not None


def _norm_backward(ctx, dy, dstats):
    x, w, stats = ctx.saved_tensors
    dx, dw, db = torch.ops.toy.norm_bwd(dy, x, w, stats)
    return dx, (dw if ctx.has_w else None), (db if ctx.has_b else None), None


norm.register_autograd(_norm_backward, setup_context=_norm_setup)


@torch.library.custom_op("toy::fused", mutates_args=())
def fused(x: torch.Tensor, w: torch.Tensor | None, b: torch.Tensor | None, residual: torch.Tensor | None,
          eps: float, act: int, slope: float) -> tuple[torch.Tensor, torch.Tensor]:
    CALLS["fused"] += 1
    y, stats = _norm(x, w, b, eps)
    y = _act(y, act, slope)
    if residual is not None:
        y = y + residual
    return y, stats


@fused.register_fake
def _(x, w, b, residual, eps, act, slope):
    return torch.empty_like(x), x.new_empty(2, x.shape[0] * x.shape[1])


@torch.library.custom_op("toy::fused_bwd", mutates_args=())
def fused_bwd(dy: torch.Tensor, x: torch.Tensor, w: torch.Tensor | None, b: torch.Tensor | None,
              stats: torch.Tensor, eps: float, act: int, slope: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    # recompute the pre-activation from x and stats (no saved intermediate), then chain rule
    N, C = x.shape[:2]
    mean, rstd = (s.view(N, C, 1, 1) for s in stats)
    z = (x - mean) * rstd
    if w is not None:
        z = z * w.view(1, -1, 1, 1)
    if b is not None:
        z = z + b.view(1, -1, 1, 1)
    return _norm_bwd_math(dy * _act_grad(z, act, slope), x, w, stats)


@fused_bwd.register_fake
def _(dy, x, w, b, stats, eps, act, slope):
    return torch.empty_like(x), x.new_empty(x.shape[1]), x.new_empty(x.shape[1])


def _fused_setup(ctx, inputs, output):
    x, w, b, residual, eps, act, slope = inputs
    ctx.save_for_backward(x, w, b, output[1])
    ctx.eps, ctx.act, ctx.slope = eps, act, slope
    ctx.has_w, ctx.has_b, ctx.has_r = w is not None, b is not None, residual is not None


def _fused_backward(ctx, dy, dstats):
    x, w, b, stats = ctx.saved_tensors
    dx, dw, db = torch.ops.toy.fused_bwd(dy, x, w, b, stats, ctx.eps, ctx.act, ctx.slope)
    return (dx, dw if ctx.has_w else None, db if ctx.has_b else None,
            dy if ctx.has_r else None, None, None, None)   # residual grad: dy itself, no copy


fused.register_autograd(_fused_backward, setup_context=_fused_setup)


class ToyNorm(torch.nn.InstanceNorm2d):
    """Mimics ModelNew.forward: y, stats = ops.forward(x, w, b, eps); return y."""
    def forward(self, x):
        y, stats = torch.ops.toy.norm(x, self.weight, self.bias, self.eps)
        return y


@torch.library.custom_op("toy::update_running_stats", mutates_args=("running_mean",))
def update_running_stats(stats: torch.Tensor, running_mean: torch.Tensor, momentum: float) -> None:
    running_mean.mul_(1 - momentum).add_(stats[0].view(-1, running_mean.numel()).mean(0), alpha=momentum)


class ToyNormRS(torch.nn.InstanceNorm2d):
    """Like ModelNew in training with track_running_stats: a mutating op uses the stats right after."""
    def forward(self, x):
        y, stats = torch.ops.toy.norm(x, self.weight, self.bias, self.eps)
        torch.ops.toy.update_running_stats(stats, self.running_mean, 0.1)
        return y
