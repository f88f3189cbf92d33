"""Thirty-sixth session: the rows' wide accesses, one case at a time, synchronized, printed as it goes
(call 2's A/B and suite died silently on rows_width_s40.patch)."""
import faulthandler, sys
faulthandler.enable()
import torch
import instance_norm as inm
inm.load_extension()
print("loaded", flush=True)
for dtype in (torch.float32, torch.bfloat16, torch.float16):
    for hw in ((2, 2), (3, 4), (2, 3), (4, 4), (7, 7), (8, 8), (6, 6)):
        for n, c in ((1, 37), (64, 256)):
            for affine in (False, True):
                x = torch.randn(n, c, *hw, device="cuda", dtype=dtype)
                m = inm.ModelNew(c, affine=affine).cuda()
                if affine:
                    with torch.no_grad():
                        m.weight.normal_(); m.bias.normal_()
                print(dtype, n, c, hw, affine, end=" ", flush=True)
                with torch.no_grad():
                    y = m(x)
                print("called", end=" ", flush=True)
                torch.cuda.synchronize()
                print("synced", end=" ", flush=True)
                ref = torch.nn.functional.instance_norm(x.double(), weight=m.weight.double() if affine else None,
                                                        bias=m.bias.double() if affine else None, eps=1e-5)
                print("err", (y.double() - ref).abs().max().item(), flush=True)
print("done", flush=True)
