"""Thirty-second session (prepared for the next): Nsight Compute of the flat forward's two paths, the committed
file (register rows within the cut) against the same file without the cut (flat_unruled_s36.patch; flat_unruled_s37.patch from the thirty-third session, built at
/tmp/vab/unruled by patch_ab_build.sh), where the uncut rows lost (fp32 (64,256,7,7) 1.05x, (64,256,12,12)
1.33x, graph replay, s36/call2-3) and where they won past the cut ((16,256,12,12) 0.88x). One no-grad call of
each after a warm call:
    ncu --profile-from-start off --kernel-name regex:flat_kernel --section SpeedOfLight --section LaunchStats \
        --section Occupancy --section WarpStateStats --section InstructionStats \
        --section MemoryWorkloadAnalysis_Tables python3 benchmarks/prototypes/ncu_rows_s36.py"""
import importlib.util
import sys

import torch

sys.path.insert(0, ".")


def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    m = importlib.util.module_from_spec(spec)
    sys.modules[name] = m
    spec.loader.exec_module(m)
    m.load_extension()
    return m


# Thirty-third session: other files as arguments, NAME=PATH ... (default: the two above).
pairs = [a.split("=", 1) for a in sys.argv[1:]] or [("cut", "instance_norm.py"), ("uncut", "/tmp/vab/unruled/instance_norm.py")]
files = {name: load(path, name) for name, path in pairs}
for dtype, shape in [(torch.float32, (64, 256, 7, 7)), (torch.bfloat16, (64, 256, 7, 7)),
                     (torch.float32, (64, 256, 12, 12)), (torch.float32, (16, 256, 12, 12))]:
    x = torch.randn(shape, device="cuda", dtype=dtype)
    for name, mod in files.items():
        m = mod.ModelNew(shape[1]).cuda()
        with torch.no_grad():
            m(x)
            torch.cuda.synchronize()
            print(name, dtype, shape, "plan", mod.chosen_plan(x), flush=True)
            torch.cuda.cudart().cudaProfilerStart()
            m(x)
            torch.cuda.synchronize()
            torch.cuda.cudart().cudaProfilerStop()
