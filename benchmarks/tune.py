"""Time candidate kernel plans per shape against the copy floor (development tool, needs a GPU).

    python benchmarks/tune.py [--shapes main|sweep] [--dtypes float32,bfloat16]

Each row: a plan forced through ``ops.forward_with_plan`` (checked against the default plan's output
first), its median time, and its ratio to a device-to-device copy of the same bytes.
"""

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import instance_norm  # noqa: E402

SHAPES = {
    "main": [(112, 64, 512, 512)],
    "sweep": [
        (64, 256, 7, 7),
        (3, 5, 127, 129),
        (32, 3, 224, 224),
        (8, 512, 32, 32),
        (16, 64, 256, 256),
        (112, 64, 512, 512),
        (1, 2, 4096, 4096),
    ],
}


def median_ms(fn, reps):
    for _ in range(3):
        fn()
    start = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    end = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for i in range(reps):
        start[i].record()
        fn()
        end[i].record()
    torch.cuda.synchronize()
    times = sorted(s.elapsed_time(e) for s, e in zip(start, end))
    return times[len(times) // 2]


def candidate_plans(slots):
    plans = [(0, 0, 0)]
    for k in (2, 4, 8):
        for g in (32, 64, 128, 256, 512, 1024):
            for cs in (1, 2, 4, 8, 16):
                if cs > 1 and g < 128:
                    continue
                capacity = k * g * cs
                if slots <= capacity <= 2 * slots + 64:
                    plans.append((k, g, cs))
    return plans


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--shapes", default="sweep")
    parser.add_argument("--dtypes", default="float32,bfloat16")
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--only", default="", help="comma-separated shape indices of the chosen set")
    args = parser.parse_args()
    ops = instance_norm.load_extension()
    print(f"# {torch.cuda.get_device_name()}  torch {torch.__version__}", flush=True)
    for dtype_name in args.dtypes.split(","):
        dtype = getattr(torch, dtype_name)
        shapes = SHAPES[args.shapes]
        if args.only:
            shapes = [shapes[int(i)] for i in args.only.split(",")]
        for shape in shapes:
            x = torch.randn(shape, device="cuda", dtype=dtype) * 2 + 3
            vec = 16 // x.element_size()
            m = shape[2] * shape[3]
            slots = m // vec if m % vec == 0 else (m + vec - 2) // vec + 1
            reps = args.reps if x.numel() > 1 << 24 else 5 * args.reps
            copy_out = torch.empty_like(x)
            floor = median_ms(lambda: copy_out.copy_(x), reps)
            ref, _ = ops.forward(x, None, None, 1e-5)
            chosen = ops.describe_plan(x)
            print(f"\n{dtype_name} {shape} default={chosen} copy={floor:.4f} ms", flush=True)
            rows = []
            for k, g, cs in candidate_plans(slots):
                try:
                    y, _ = ops.forward_with_plan(x, None, None, 1e-5, k, g, cs)
                    err = (y.float() - ref.float()).abs().max().item()
                    t = median_ms(lambda: ops.forward_with_plan(x, None, None, 1e-5, k, g, cs), reps)
                    rows.append((t, k, g, cs, err))
                except RuntimeError as e:
                    print(f"  K={k} G={g} CS={cs}: {str(e).splitlines()[0][:90]}")
            t_default = median_ms(lambda: ops.forward(x, None, None, 1e-5), reps)
            for t, k, g, cs, err in sorted(rows)[:8]:
                name = "multi_cta" if cs == 0 else f"K={k} G={g} CS={cs}"
                print(f"  {name:<22} {t:8.4f} ms  x{t / floor:5.2f} floor   maxdiff {err:.1e}", flush=True)
            print(f"  {'default':<22} {t_default:8.4f} ms  x{t_default / floor:5.2f} floor", flush=True)
            del x, copy_out, ref
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
