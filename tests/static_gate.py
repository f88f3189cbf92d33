"""Our own copy of the static gate KernelBench runs before it evaluates a submission.

KernelBench (github.com/ScalingIntelligence/KernelBench) rejects files with
``src/kernelbench/kernel_static_checker.py``: plain regexes over the source after a naive
comment strip.  This module re-implements the rules that apply to a CUDA submission with the
same regexes and the same semantics, but reports every hit with its line number instead of
one message per rule:

* comment stripping, per line (lines split on "\\n"): cut at the first ``#``, then at the first
  ``//``, even inside string literals, exactly as the checker does;
* errors (its STRICT_CHECKS plus the backend check): code_bypass, timing_event_patch,
  thread_injection, lazy_eval, cuda_impl;
* warnings (its WARNING_CHECKS): pytorch_wrap, torch_computation_ops, stream_injection,
  precision_downgrade (only when the required precision is fp32/float32);
* one rule of ours, half_type (fp32 only, warning): the bare identifiers ``__half`` and
  ``half2``, which the checker's docstring lists as downgrades but its regexes do not match.

The checker searches the whole stripped text, so a pattern can match across lines (``\\s``
matches a newline).  We search each stripped line for the line number and the whole stripped
text too; a whole-text match that touches no line with a hit of its own is reported with
line 0 (its text names the lines it spans).  Stripping keeps the line count, so line N of the
stripped text is line N of the file.

Usage: ``python tests/static_gate.py instance_norm.py [--precision fp32] [--backend cuda]``
prints every hit and exits 1 on any error.  Needs only the standard library.
"""

import argparse
import re
import sys

# ---------------------------------------------------------------- rules (checker's regexes)

_TORCH_OPS = """
    mm bmm matmul einsum conv1d conv2d conv3d conv conv_transpose1d conv_transpose2d
    conv_transpose3d avg_pool1d avg_pool2d avg_pool3d max_pool1d max_pool2d max_pool3d
    adaptive_avg_pool1d adaptive_avg_pool2d adaptive_avg_pool3d adaptive_max_pool1d
    adaptive_max_pool2d adaptive_max_pool3d relu hardtanh elu selu leaky_relu gelu softsign
    softplus softmax log_softmax tanh sigmoid hardsigmoid silu mish batch_norm group_norm
    layer_norm instance_norm rms_norm normalize linear cross_entropy kl_div mse_loss
    huber_loss triplet_margin_loss cosine_similarity logsumexp clamp dropout
"""
TORCH_COMPUTATION_OPS = ["torch." + name for name in _TORCH_OPS.split()]

ERROR_RULES = {
    "code_bypass": [r"\btry\s*:", r"\bexcept\s*:", r"\bexcept\s+\w+", r"\bpass\b"],
    "timing_event_patch": [
        r"torch\.cuda\.Event\.record\s*=", r"torch\.cuda\.Event\.elapsed_time\s*=",
        r"torch\.cuda\.synchronize\s*=", r"torch\.cuda\.Event\s*=",
        r"time\.perf_counter\s*=", r"time\.time\s*=",
    ],
    "thread_injection": [
        r"threading\.Thread\s*\(", r"import\s+threading", r"from\s+threading\s+import",
        r"multiprocessing\.(Process|Pool|Manager|Queue|Pipe)", r"import\s+multiprocessing",
        r"concurrent\.futures", r"ThreadPoolExecutor", r"ProcessPoolExecutor",
    ],
    "lazy_eval": [
        r"_make_subclass", r"class\s+\w+.*\(torch\.Tensor\)", r"class\s+\w+.*\(Tensor\)",
        r"torch\.Tensor\.__new__",
    ],
}

WARNING_RULES = {
    "pytorch_wrap": [
        r"torch\.nn\.(?!(Module|parameter|Parameter|ParameterList|ParameterDict|ModuleList"
        r"|ModuleDict|init)\b)",
    ],
    "torch_computation_ops": [
        r"\b(" + "|".join(re.escape(op) for op in TORCH_COMPUTATION_OPS) + r")(?=\s*\(|\s|$)",
        r"torch\.nn\.functional\.\w+", r"\bnn\.functional\.\w+",
        r"\bF\.(conv|linear|relu|gelu|softmax|batch_norm|layer_norm|dropout|max_pool|avg_pool)",
    ],
    "stream_injection": [
        r"torch\.cuda\.Stream\s*\(", r"cuda\.Stream\s*\(", r"with\s+torch\.cuda\.stream",
        r"\.wait_stream\s*\(", r"\.record_stream\s*\(",
    ],
}

FP32_ONLY_WARNING_RULES = {
    "precision_downgrade": [
        r"__float2half(_rn)?\s*\(", r"\(\s*__half\s*\)\s*[\w\->\.]+",
        r"static_cast\s*<\s*(__half|half)\s*>\s*\(", r"tl\.astype\s*\(\s*[^,]+,\s*tl\.float16\s*\)",
        r"NumericConverter\s*<\s*half_t\s*,\s*float\s*>", r"LinearCombination\s*<\s*half_t",
        r"type_convert\s*<\s*half_t\s*>\s*\(", r"tk::half\s*\(", r"\.half\s*\(", r"\.float16\s*\(",
        r"\.to\s*\(\s*torch\.(float16|half)\b", r"\.to\s*\(\s*dtype\s*=\s*torch\.(float16|half)\b",
    ],
    "half_type": [r"\b__half\b", r"\bhalf2\b"],  # ours, not the checker's (see docstring)
}

# cuda_impl: every requirement must be met somewhere in the stripped text.
CUDA_COMPILE_STRINGS = ["load_inline", "cpp_extension"]
CUDA_FEATURE_PATTERNS = [
    r"\bthreadIdx\.", r"\bblockIdx\.", r"\bblockDim\.", r"\bgridDim\.",
    r"__syncthreads\s*\(", r"__shared__\s+", r"__device__\s+",
    r"atomicAdd\s*\(", r"atomicMax\s*\(", r"atomicMin\s*\(",
]
OTHER_BACKENDS = {"hip", "triton", "thunderkittens", "cute", "cutlass", "tilelang"}
_PRECISION_ALIASES = {"float32": "fp32", "bfloat16": "bf16"}


# ---------------------------------------------------------------- scanning

def strip_line(line):
    """The checker's comment strip of one line: first '#', then first '//', strings ignored."""
    if "#" in line:
        line = line[:line.index("#")]
    if "//" in line:
        line = line[:line.index("//")]
    return line


def _scan(rule, patterns, original, stripped):
    """Hits of one rule, at most one per line, plus line-0 hits for multi-line matches."""
    text = "\n".join(stripped)
    hit_lines = set()
    extra = []
    for pattern in patterns:
        rx = re.compile(pattern)
        lines_here = {n for n, line in enumerate(stripped, 1) if rx.search(line)}
        hit_lines |= lines_here
        for m in rx.finditer(text):
            first = text.count("\n", 0, m.start()) + 1
            last = first + m.group(0).count("\n")
            if not lines_here.intersection(range(first, last + 1)):
                extra.append((rule, 0, "lines %d-%d: %r" % (first, last, m.group(0))))
    hits = [(rule, n, original[n - 1].strip()) for n in sorted(hit_lines)]
    return hits + extra


def check(text, precision="fp32", backend="cuda"):
    """(errors, warnings) for a submission's source text.

    Each entry is (rule_name, line_number, line_text), line numbers 1-based in `text`;
    line 0 marks a missing cuda_impl requirement or a match spanning lines.  Pass
    backend=None to skip the backend requirements (as the checker does for unknown backends).
    """
    original = text.split("\n")
    stripped = [strip_line(line) for line in original]
    precision = precision.lower()
    precision = _PRECISION_ALIASES.get(precision, precision)

    errors = []
    for rule, patterns in ERROR_RULES.items():
        errors += _scan(rule, patterns, original, stripped)
    if backend == "cuda":
        code = "\n".join(stripped)
        if "__global__" not in code:
            errors.append(("cuda_impl", 0, "missing __global__ kernel definition"))
        if not any(s in code for s in CUDA_COMPILE_STRINGS):
            errors.append(("cuda_impl", 0, "missing load_inline or cpp_extension"))
        if not any(re.search(p, code) for p in CUDA_FEATURE_PATTERNS):
            errors.append(("cuda_impl", 0, "missing thread indexing or kernel features "
                           "(threadIdx, blockIdx, __syncthreads, __shared__, ...)"))
    elif backend in OTHER_BACKENDS:
        raise NotImplementedError("only the cuda backend's requirements are implemented")

    warnings = []
    rules = dict(WARNING_RULES)
    if precision == "fp32":
        rules.update(FP32_ONLY_WARNING_RULES)
    for rule, patterns in rules.items():
        warnings += _scan(rule, patterns, original, stripped)
    return errors, warnings


def format_hits(hits):
    return "\n".join("line %d: %s: %s" % (n, rule, line) for rule, n, line in hits)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("path")
    parser.add_argument("--precision", default="fp32")
    parser.add_argument("--backend", default="cuda")
    args = parser.parse_args(argv)
    with open(args.path, encoding="utf-8") as f:
        errors, warnings = check(f.read(), args.precision, args.backend)
    for label, hits in (("ERROR", errors), ("WARNING", warnings)):
        for rule, n, line in hits:
            print("%s line %d: %s: %s" % (label, n, rule, line))
    print("%s (precision %s, backend %s): %d error(s), %d warning(s)"
          % (args.path, args.precision, args.backend, len(errors), len(warnings)))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
