# cl_split forward without statistics (no grad, no running stats): the merge gets a null stats pointer.
import torch, torch.nn.functional as F, instance_norm as m
m.load_extension()
for shape in ((4, 64, 256, 256), (2, 32, 64, 64, 64), (3, 48, 200, 120)):
    for dtype in (torch.float32, torch.bfloat16):
        x = torch.randn(shape, device="cuda", dtype=dtype) * 3 + 1
        x = x.contiguous(memory_format=torch.channels_last if x.dim() == 4 else torch.channels_last_3d)
        for affine in (False, True):
            norm = (m.ModelNew if x.dim() == 4 else m.InstanceNorm3d)(shape[1], affine=affine).cuda()
            with torch.no_grad():
                if affine:
                    norm.weight.normal_(); norm.bias.normal_()
                y = norm(x)
                ref = F.instance_norm(x.double(), weight=None if not affine else norm.weight.double(),
                                      bias=None if not affine else norm.bias.double())
            err = ((y.double() - ref).norm() / ref.norm()).item()
            print(shape, dtype, affine, m.chosen_plan(x), f"rel err {err:.2e}", "OK" if err < (1e-5 if dtype == torch.float32 else 8e-3) else "BAD", flush=True)
