"""Which error paths of the extension raise cleanly (dev tool): one case per process."""
import sys
import torch
import instance_norm

ops = instance_norm.load_extension()
x = torch.randn(2, 3, 16, 16, device="cuda")
cases = {
    "weight_size": lambda: ops.forward(x, torch.randn(5, device="cuda"), None, 1e-5),
    "rank": lambda: ops.forward(x[0], None, None, 1e-5),
    "int": lambda: ops.forward(x.long(), None, None, 1e-5),
    "bad_k": lambda: ops.forward_with_plan(x, None, None, 1e-5, 3, 32, 1),
    "too_small": lambda: ops.forward_with_plan(x, None, None, 1e-5, 2, 32, 1),
    "double_literal": lambda: ops.forward_with_plan(x.double(), None, None, 1e-5, 2, 32, 1),
}
name = sys.argv[1]
try:
    cases[name]()
    print(name, "NO ERROR")
except Exception as e:
    print(name, "raised", type(e).__name__, str(e).splitlines()[0][:100])
