"""Do two instance_norm.py files give the same bits? (twenty-fifth session; for changes meant to move
no result, e.g. a host-side reciprocal.) Forward and backward of an affine ModelNew with running
statistics, and its eval forward, over shapes that reach every regime, float32 / bfloat16 / float16 /
float64. Usage: python3 bitwise_ab.py A.py B.py  (prints one line per case and a summary)."""
import sys, importlib.util, torch

def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    m.load_extension()
    return m

a, b = load(sys.argv[1], "bw_a"), load(sys.argv[2], "bw_b")
shapes = [(8, 512, 32, 32), (64, 256, 7, 7), (3, 5, 127, 129), (1, 16, 64, 64), (4, 128, 128, 128),
          (16, 64, 256, 256), (1, 2, 1024, 2048), (2, 3, 1, 1000003), (5, 7, 3, 3)]
# The stream backward's K=8 plans (no shape above takes them; a review, twenty-sixth session): float32
# instances of 131073-262144 elements, 16-bit few-instance shapes; contiguous, their plan printed.
k8 = [((2, 8, 384, 384), (torch.float32,)), ((16, 16, 448, 448), (torch.float32,)), ((8, 32, 512, 512), (torch.float32,)),
      ((32, 3, 224, 224), (torch.bfloat16, torch.float16)), ((1, 64, 256, 256), (torch.bfloat16, torch.float16)),
      ((8, 24, 224, 224), (torch.bfloat16, torch.float16))]


def case(shape, dtype, cl):
    x = torch.randn(shape, device="cuda", dtype=dtype) * 3 + 1
    if cl:
        x = x.to(memory_format=torch.channels_last)
    dy = torch.randn_like(x)
    outs = []
    for m in (a, b):
        mod = m.ModelNew(shape[1], affine=True, track_running_stats=True).cuda()
        with torch.no_grad():
            mod.weight.copy_(torch.linspace(0.5, 1.5, shape[1]))
            mod.bias.copy_(torch.linspace(-1, 1, shape[1]))
        xi = x.clone().requires_grad_(True)
        y = mod(xi)
        y.backward(dy)
        mod.eval()
        ye = mod(x)
        outs.append([y.detach(), xi.grad, mod.weight.grad, mod.bias.grad, ye, mod.running_mean, mod.running_var])
    return all(torch.equal(p, q) for p, q in zip(*outs)), x


bad = 0
for shape in shapes:
    for dtype in (torch.float32, torch.bfloat16, torch.float16, torch.float64):
        for cl in (False, True):
            same, _ = case(shape, dtype, cl)
            bad += not same
            print(shape, dtype, "cl" if cl else "", "same" if same else "DIFFERENT")
for shape, dtypes in k8:
    for dtype in dtypes:
        same, x = case(shape, dtype, False)
        bad += not same
        print(shape, dtype, "backward", a.chosen_plan(x, backward=True), "same" if same else "DIFFERENT")
print("bitwise:", "all same" if bad == 0 else f"{bad} cases differ")
