"""E9: a short training loop through a compiled network (fusion on) vs the same network eager with
nn.InstanceNorm2d + activations: losses and gradients match; count fused ops in the compiled graphs."""
import copy, torch, torch.nn as nn, toyops, fusepass
import torch._inductor.config as ic
print("torch", torch.__version__)
torch.manual_seed(0)
fusepass.install()
fw_bw = []
ic.post_grad_custom_post_pass = lambda g: fw_bw.append(sum(1 for n in g.nodes if n.op == "call_function" and str(n.target).startswith("toy.fused")))
class ResBlock(nn.Module):
    def __init__(self, Norm):
        super().__init__()
        self.c1, self.n1, self.a1 = nn.Conv2d(8, 8, 3, padding=1), Norm(8, affine=True), nn.LeakyReLU(0.2, inplace=True)
        self.c2, self.n2 = nn.Conv2d(8, 8, 3, padding=1), Norm(8, affine=True)
    def forward(self, x):
        return x + self.n2(self.c2(self.a1(self.n1(self.c1(x)))))
def net(Norm):
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), Norm(8, affine=True), nn.ReLU(True), ResBlock(Norm), ResBlock(Norm), nn.Conv2d(8, 3, 1))
ref = net(nn.InstanceNorm2d).double()
ours = net(toyops.ToyNorm).double(); ours.load_state_dict(ref.state_dict())
cours = torch.compile(ours, fullgraph=True)
opt_r, opt_o = (torch.optim.SGD(m.parameters(), lr=0.05) for m in (ref, ours))
for step in range(4):
    x = torch.randn(4, 3, 16, 16, dtype=torch.float64); t = torch.randn_like(x)
    lr_ = ((ref(x) - t) ** 2).mean(); lo = ((cours(x) - t) ** 2).mean()
    opt_r.zero_grad(); opt_o.zero_grad(); lr_.backward(); lo.backward()
    gmax = max((a.grad - b.grad).abs().max().item() for a, b in zip(ref.parameters(), ours.parameters()))
    print(f"step {step}: loss ref {lr_.item():.10f} ours {lo.item():.10f}  max|grad diff| {gmax:.2e}")
    opt_r.step(); opt_o.step()
print("fused ops in the compiled forward / backward graphs:", fw_bw, " pass replacements:", fusepass.STATS)
