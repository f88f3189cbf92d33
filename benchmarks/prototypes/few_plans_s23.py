"""The plans the heuristic picks for 1..20 instances of a few sizes (nineteenth session): shows where
widest_stream's residency test moves from 16-CTA clusters to 8 and 4 on this device."""
import torch, instance_norm as inm
inm.load_extension()
print(torch.cuda.get_device_name(), torch.cuda.get_device_properties(0).multi_processor_count, "SMs")
for hw in ((256, 256), (224, 224), (512, 512), (64, 64)):
    for dtype in (torch.float32, torch.bfloat16):
        row = []
        for n in (1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16, 17, 20, 33, 64, 132, 133):
            x = torch.empty((1, n) + hw, device="cuda", dtype=dtype)
            f, b = inm.chosen_plan(x), inm.chosen_plan(x, True)
            short = lambda p: f"{p.regime[:2]}{p.vectors}/{p.threads}/{p.cluster}/{p.stages}"
            row.append(f"{n}:{short(f)},{short(b)}")
        print(f"{dtype} {hw}: " + "  ".join(row))
