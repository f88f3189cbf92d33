"""Twenty-ninth session: one forward on a forced plan, bracketed by cudaProfilerStart/Stop for
ncu --profile-from-start off. usage: python ncu_fwd_plan_s33.py N C H W dtype REGIME [vectors threads cluster stages]
(REGIME multi_cta, or stream with K, 0, CS, S)."""
import sys, torch
import instance_norm as inm
n, c, h, w = map(int, sys.argv[1:5]); dtype = getattr(torch, sys.argv[5])
inm.load_extension()
plan = inm.Plan.multi_cta() if sys.argv[6] == "multi_cta" else inm.Plan.stream(int(sys.argv[9]), int(sys.argv[10]), int(sys.argv[7]))
x = torch.randn(n, c, h, w, device="cuda", dtype=dtype)
wt = torch.randn(c, device="cuda")
for _ in range(5):
    inm.forward_with_plan(x, wt, None, 1e-5, plan, None, 0, 0.0)
torch.cuda.synchronize()
torch.cuda.profiler.start()
inm.forward_with_plan(x, wt, None, 1e-5, plan, None, 0, 0.0)
torch.cuda.synchronize()
torch.cuda.profiler.stop()
