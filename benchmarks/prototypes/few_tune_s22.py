"""Few-instance shapes (instances x 8 <= SMs): device time of every tight candidate plan against the
chosen one (do_bench, L2 flushed), fp32 / bf16 / fp16, and the copy of the same bytes."""
import sys, time, torch, triton
sys.path.insert(0, ".")
import instance_norm as inm
inm.load_extension()
t0 = time.time()
for shape in [(3, 5, 127, 129), (1, 8, 128, 128), (2, 8, 96, 96), (1, 16, 64, 64), (1, 4, 256, 256), (1, 3, 224, 224)]:
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        if time.time() - t0 > 75: break
        x = torch.randn(shape, device="cuda", dtype=dtype)
        b = lambda f: triton.testing.do_bench(f, warmup=5, rep=25, return_mode="median") * 1e3
        res = sorted((b(lambda: inm.forward_with_plan(x, None, None, 1e-5, p)), str(p)) for p in inm.candidate_plans(x, tight=True))
        chosen = str(inm.chosen_plan(x))
        tc = [t for t, p in res if p == chosen]
        cp = b(lambda: torch.empty_like(x).copy_(x))
        print(f"{str(dtype)[6:]} {shape} copy {cp:.2f} chosen {chosen} {tc[0] if tc else float('nan'):.2f} | best: " + "; ".join(f"{p} {t:.2f}" for t, p in res[:5]), flush=True)
