"""Time candidate kernel plans per shape against the copy floor (development tool, needs a GPU).

    python benchmarks/tune.py [--shapes main|sweep|NxCxHxW,...] [--dtypes float32,bfloat16] [--backward] [--graph] [--loose]
                              [--match stream,...] [--module path/to/instance_norm.py] [--act leaky_relu]
                              [--channels-last]

The plans are the ones the host's plan space lists for the shape (``instance_norm.candidate_plans``
with ``tight``: every regime, at most about twice the capacity an instance needs), so this tool
never re-derives which plans exist. Each row: a plan forced through ``forward_with_plan`` (or
``backward_with_plan``), checked against the multi_cta plan's output first, its device time
(``triton.testing.do_bench`` median, L2 flushed), and its ratio to the floor: a device-to-device
copy of the same bytes (forward), or ``torch.add(x, dy, out=dx)`` (backward). ``--act`` times the
kernels with that activation epilogue (leaky_relu with slope 0.01), whose registers differ from the
plain ones (benchmarks/NOTES.md). ``--channels-last`` gives x and dy channels_last strides (the shapes
are NxCxHxW): the channel-last plans are listed then.
"""

import argparse
import importlib.util
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import instance_norm  # noqa: E402
from shapes import parse_shapes  # noqa: E402  (run as a script, benchmarks/ is on sys.path)


def device_ms(fn):
    from triton.testing import do_bench

    return do_bench(fn, warmup=25, rep=100, return_mode="median")


def graph_ms(fn, calls=20, replays=15):
    """Device time per call from CUDA-graph replay of `calls` back-to-back calls (L2 warm: what a
    small shape costs inside a captured network, with no launch or host cost); median over replays."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    graph.replay()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(replays):
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / calls)
    return sorted(times)[len(times) // 2]


def main():
    global instance_norm  # --module replaces it (declared before main's first use of the name)
    parser = argparse.ArgumentParser()
    parser.add_argument("--shapes", default="sweep")
    parser.add_argument("--dtypes", default="float32,bfloat16")
    parser.add_argument("--top", type=int, default=8)
    parser.add_argument("--backward", action="store_true", help="tune backward_with_plan instead")
    parser.add_argument("--match", default="", help="only plans whose name contains one of these (comma list)")
    parser.add_argument("--loose", action="store_true",
                        help="every plan the host accepts, not only those within about twice the capacity needed")
    parser.add_argument("--graph", action="store_true",
                        help="time by CUDA-graph replay (L2 warm) instead of do_bench (L2 flushed)")
    parser.add_argument("--module", help="tune this file's build instead of the repository's instance_norm.py "
                        "(e.g. a branch's copy; its extension builds under its own name)")
    parser.add_argument("--act", default="identity", choices=instance_norm.ACTIVATIONS,
                        help="the epilogue's activation (instance_norm.ACTIVATIONS; leaky_relu: slope 0.01)")
    parser.add_argument("--channels-last", action="store_true",
                        help="x and dy in channels_last memory")
    args = parser.parse_args()
    if args.module:
        spec = importlib.util.spec_from_file_location("instance_norm_tuned", args.module)
        instance_norm = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(instance_norm)
    timer = graph_ms if args.graph else device_ms
    act = instance_norm.ACTIVATIONS.index(args.act)
    slope = 0.01 if args.act == "leaky_relu" else 0.0
    ops = instance_norm.load_extension()
    multi_cta = instance_norm.Plan.multi_cta()
    print(f"# {torch.cuda.get_device_name()}  torch {torch.__version__}  "
          f"timing: {'CUDA-graph replay, L2 warm' if args.graph else 'do_bench median, L2 flushed'}", flush=True)
    for dtype_name in args.dtypes.split(","):
        dtype = getattr(torch, dtype_name)
        for shape in parse_shapes(args.shapes):
            x = torch.randn(shape, device="cuda", dtype=dtype) * 2 + 3
            if args.channels_last:
                x = x.contiguous(memory_format=torch.channels_last)
            w = torch.randn(shape[1], device="cuda")
            out = torch.empty_like(x)
            if args.backward:
                dy = torch.randn_like(x)  # x's memory format
                floor = timer(lambda: torch.add(x, dy, out=out))
                _, stats = ops.forward(x, w, None, 1e-5)

                def run(plan):
                    return instance_norm.backward_with_plan(dy, x, w, None, stats, plan, act, slope)

                default = lambda: ops.backward(dy, x, w, None, stats, act, slope)  # noqa: E731
            else:
                floor = timer(lambda: out.copy_(x))

                def run(plan):
                    return instance_norm.forward_with_plan(x, w, None, 1e-5, plan, None, act, slope)

                default = (lambda: ops.forward(x, w, None, 1e-5)) if act == 0 else (  # noqa: E731
                    lambda: ops.fused_forward(x, w, None, None, 1e-5, act, slope))
            ref = run(multi_cta)[0]
            chosen = instance_norm.chosen_plan(x, args.backward)
            print(f"\n{dtype_name} {shape}{' channels_last' if args.channels_last else ''} "
                  f"{'backward' if args.backward else 'forward'} act={args.act} default={chosen} "
                  f"floor={floor:.4f} ms", flush=True)
            rows = []
            for plan in instance_norm.candidate_plans(x, args.backward, tight=not args.loose):
                if args.match and not any(part in str(plan) for part in args.match.split(",")):
                    continue
                try:
                    err = (run(plan)[0].float() - ref.float()).abs().max().item()
                except RuntimeError as refusal:  # a plan the epilogue's kernel cannot hold (--act)
                    if not str(refusal).startswith("instance_norm:"):
                        raise  # a fault, not a refusal: the CUDA context may be gone
                    print(f"  {str(plan):<26} refused: {str(refusal).splitlines()[0]}", flush=True)
                    continue
                rows.append((timer(lambda: run(plan)), str(plan), err))
            t_default = timer(default)
            # A plan off the multi_cta plan's output by more than about one rounding of the element type at
            # |y| ~ 4 is shown whatever its time (dx only, for the backward).
            tol = {torch.float32: 1e-4, torch.float16: 4e-3, torch.bfloat16: 3.2e-2}[dtype]
            ranked = sorted(rows)
            for t, name, err in ranked[: args.top] + [r for r in ranked[args.top:] if r[2] > tol]:
                flag = "   !! above tolerance" if err > tol else ""
                print(f"  {name:<26} {t:8.4f} ms  x{t / floor:5.2f} floor   maxdiff {err:.1e}{flag}", flush=True)
            print(f"  {'default':<26} {t_default:8.4f} ms  x{t_default / floor:5.2f} floor", flush=True)
            del x, out, ref
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
