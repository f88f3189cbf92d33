"""Time candidate kernel plans per shape against the copy floor (development tool, needs a GPU).

    python benchmarks/tune.py [--shapes main|sweep|NxCxHxW,...] [--dtypes float32,bfloat16] [--backward]

Each row: a plan forced through ``ops.forward_with_plan`` (or ``backward_with_plan``), checked
against the multi_cta plan's output first, its median time, and its ratio to the floor: a
device-to-device copy of the same bytes (forward), or ``torch.add(x, dy, out=dx)`` (backward).
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


def parse_shapes(text):
    if text in SHAPES:
        return SHAPES[text]
    return [tuple(int(v) for v in item.split("x")) for item in text.split(",")]


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


def candidate_plans(m, vec):
    """(vectors_per_thread, threads_per_instance, cluster_size[, stages]) worth timing for H*W = m."""
    slots = m // vec if m % vec == 0 else (m + vec - 2) // vec + 1
    plans = [(0, 0, 0)]
    for k in (2, 4, 8):
        for g in (32, 64, 128, 256, 512, 1024):
            for cs in (1, 2, 4, 8, 16):
                if cs > 1 and g < 128:
                    continue
                capacity = k * g * cs
                if slots <= capacity <= 2 * slots + 64:
                    plans.append((k, g, cs))
    if m % vec == 0:
        for cs in (1, 2, 4, 8, 16):
            if -(-(m // vec) // cs) <= 8 * 512:
                plans += [(8, 512, cs, stages) for stages in (1, 2, 3, 4)]
    return plans


def plan_name(plan):
    if plan[2] == 0:
        return "multi_cta"
    return "K=%d G=%d CS=%d" % plan[:3] + (" S=%d" % plan[3] if len(plan) == 4 else "")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--shapes", default="sweep")
    parser.add_argument("--dtypes", default="float32,bfloat16")
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--top", type=int, default=8)
    parser.add_argument("--backward", action="store_true", help="tune backward_with_plan instead")
    parser.add_argument("--match", default="", help="only plans whose name contains one of these (comma list)")
    args = parser.parse_args()
    ops = instance_norm.load_extension()
    print(f"# {torch.cuda.get_device_name()}  torch {torch.__version__}", flush=True)
    for dtype_name in args.dtypes.split(","):
        dtype = getattr(torch, dtype_name)
        for shape in parse_shapes(args.shapes):
            x = torch.randn(shape, device="cuda", dtype=dtype) * 2 + 3
            w = torch.randn(shape[1], device="cuda")
            vec = 16 // x.element_size()
            m = shape[2] * shape[3]
            reps = args.reps if x.numel() > 1 << 24 else 5 * args.reps
            if args.backward:
                dy = torch.randn_like(x)
                out = torch.empty_like(x)
                floor = median_ms(lambda: torch.add(x, dy, out=out), reps)
                _, stats = ops.forward(x, w, None, 1e-5)
                ref, _ = ops.backward_with_plan(dy, x, w, stats, 0, 0, 0)

                def run(plan):
                    return ops.backward_with_plan(dy, x, w, stats, *plan)

                chosen = ops.describe_plan(x, True)
                default = lambda: ops.backward(dy, x, w, stats)  # noqa: E731
            else:
                out = torch.empty_like(x)
                floor = median_ms(lambda: out.copy_(x), reps)
                ref, _ = ops.forward_with_plan(x, w, None, 1e-5, 0, 0, 0)

                def run(plan):
                    return ops.forward_with_plan(x, w, None, 1e-5, *plan)

                chosen = ops.describe_plan(x)
                default = lambda: ops.forward(x, w, None, 1e-5)  # noqa: E731
            print(f"\n{dtype_name} {shape} {'backward' if args.backward else 'forward'} default={chosen} "
                  f"floor={floor:.4f} ms", flush=True)
            rows = []
            for plan in candidate_plans(m, vec):
                if args.match and not any(part in plan_name(plan) for part in args.match.split(",")):
                    continue
                try:
                    y, _ = run(plan)
                    err = (y.float() - ref.float()).abs().max().item()
                    t = median_ms(lambda: run(plan), reps)
                    rows.append((t, plan, err))
                except RuntimeError as e:
                    print(f"  {plan_name(plan)}: {str(e).splitlines()[0][:90]}")
            t_default = median_ms(default, reps)
            for t, plan, err in sorted(rows)[: args.top]:
                print(f"  {plan_name(plan):<24} {t:8.4f} ms  x{t / floor:5.2f} floor   maxdiff {err:.1e}", flush=True)
            print(f"  {'default':<24} {t_default:8.4f} ms  x{t_default / floor:5.2f} floor", flush=True)
            del x, out, ref
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
