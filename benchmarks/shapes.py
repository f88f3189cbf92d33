"""Benchmark shapes and dtypes, defined once for bench.py and tune.py (standard library only)."""

import argparse

# (N, C, H, W): tiny instances, odd sizes, mid-size, the main shape (KernelBench level 1 problem 34,
# 7.5 GB in float32) and a few huge instances.
SWEEP = [
    (64, 256, 7, 7),
    (3, 5, 127, 129),
    (32, 3, 224, 224),
    (8, 512, 32, 32),
    (4, 128, 128, 128),
    (16, 64, 256, 256),
    (112, 64, 512, 512),
    (1, 2, 4096, 4096),
]
MAIN = [(112, 64, 512, 512)]
QUICK = SWEEP  # --quick keeps every shape (the main shape in every dtype) and shortens the timing
# bench.py --fused --quick: each of its compiles costs seconds, so a few shapes: tiny instances
# (where a fused block is most at risk of being slower), mid-size, and the main shape.
FUSED_QUICK = [(64, 256, 7, 7), (4, 128, 128, 128), (16, 64, 256, 256), (112, 64, 512, 512)]
NAMED = {"sweep": SWEEP, "main": MAIN, "quick": QUICK, "fused_quick": FUSED_QUICK}

DTYPES = ("float32", "bfloat16", "float16")
ALIASES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}
DEFAULT_DTYPES = "float32,bfloat16"


def parse_shapes(text):
    """NAMED keys or NxCxHxW items, comma separated (mixing allowed) -> list of 4-tuples."""
    shapes = []
    for item in (part.strip().lower() for part in text.split(",")):
        if item in NAMED:
            shapes += NAMED[item]
            continue
        try:
            shape = tuple(int(v) for v in item.split("x"))
        except ValueError:
            shape = ()
        if len(shape) != 4 or min(shape) < 1:
            raise argparse.ArgumentTypeError(f"{item!r}: expected {', '.join(NAMED)} or NxCxHxW (positive)")
        shapes.append(shape)
    return list(dict.fromkeys(shapes))  # drop repeats, keep the order


def parse_dtypes(text):
    """Comma list of DTYPES names or ALIASES -> list of DTYPES names."""
    names = [name.strip().lower() for name in text.split(",") if name.strip()]
    names = [ALIASES.get(name, name) for name in names]
    bad = [name for name in names if name not in DTYPES]
    if bad or not names:
        raise argparse.ArgumentTypeError(f"dtypes {bad or text!r}: choose from {', '.join(DTYPES)}")
    return list(dict.fromkeys(names))
