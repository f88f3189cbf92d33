"""KernelBench's static gate (tests/static_gate.py) on instance_norm.py, plus self-tests.

CPU only: reads the file text, never imports instance_norm or builds anything.
"""

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from static_gate import check, format_hits  # noqa: E402

PRECISIONS = ["fp32", "fp16", "bf16"]


# --------------------------------------------------------------------------- instance_norm.py

@pytest.mark.parametrize("precision", PRECISIONS)
def test_no_errors(source_text, precision):
    errors, _ = check(source_text, precision)
    if errors:
        pytest.fail("static gate errors (KernelBench would reject the file):\n"
                    + format_hits(errors), pytrace=False)


@pytest.mark.parametrize("precision", PRECISIONS)
def test_no_warnings(source_text, precision):
    _, warnings = check(source_text, precision)
    if warnings:
        pytest.fail("static gate warnings:\n" + format_hits(warnings), pytrace=False)


# --------------------------------------------------------------------------- self-tests

def hits(snippet, precision="fp32"):
    """(rule, line) of every hit, backend requirements left out."""
    errors, warnings = check(snippet, precision, backend=None)
    return [(rule, n) for rule, n, _ in errors + warnings]


POSITIVE = [
    ("code_bypass", "try:"), ("code_bypass", "    try :"), ("code_bypass", "except:"),
    ("code_bypass", "except Exception as e:"), ("code_bypass", "    pass"),
    ("code_bypass", "if x: pass"),
    ("timing_event_patch", "torch.cuda.Event.record = f"),
    ("timing_event_patch", "torch.cuda.Event.elapsed_time = f"),
    ("timing_event_patch", "torch.cuda.synchronize = f"),
    ("timing_event_patch", "torch.cuda.Event = E"),
    ("timing_event_patch", "time.perf_counter = f"), ("timing_event_patch", "time.time = f"),
    ("thread_injection", "t = threading.Thread(target=f)"),
    ("thread_injection", "import threading"), ("thread_injection", "from threading import Lock"),
    ("thread_injection", "p = multiprocessing.Pool(4)"),
    ("thread_injection", "import multiprocessing"),
    ("thread_injection", "import concurrent.futures"),
    ("thread_injection", "ThreadPoolExecutor"), ("thread_injection", "ProcessPoolExecutor"),
    ("lazy_eval", "t = torch.Tensor._make_subclass(cls, x)"),
    ("lazy_eval", "class Lazy(torch.Tensor):"), ("lazy_eval", "class Lazy(Tensor):"),
    ("lazy_eval", "obj = torch.Tensor.__new__(cls)"),
    ("pytorch_wrap", "self.norm = torch.nn.InstanceNorm2d(3)"),
    ("torch_computation_ops", "y = torch.relu(x)"),
    ("torch_computation_ops", "y = torch.instance_norm (x)"),
    ("torch_computation_ops", "f = torch.tanh"),
    ("torch_computation_ops", "y = F.relu(x)"),
    ("torch_computation_ops", "y = nn.functional.gelu(x)"),
    ("stream_injection", "s = torch.cuda.Stream()"), ("stream_injection", "s = cuda.Stream()"),
    ("stream_injection", "with torch.cuda.stream(s):"),
    ("stream_injection", "a.wait_stream(b)"), ("stream_injection", "t.record_stream(s)"),
    ("precision_downgrade", "h = __float2half_rn(v);"),
    ("precision_downgrade", "h = __float2half(v);"),
    ("precision_downgrade", "h = (__half) v;"),
    ("precision_downgrade", "h = static_cast<half>(v);"),
    ("precision_downgrade", "y = tl.astype(x, tl.float16)"),
    ("precision_downgrade", "NumericConverter<half_t, float> c;"),
    ("precision_downgrade", "using E = LinearCombination<half_t, 8>;"),
    ("precision_downgrade", "h = type_convert<half_t>(x);"),
    ("precision_downgrade", "h = tk::half(x);"),
    ("precision_downgrade", "y = x.half()"), ("precision_downgrade", "y = x.float16()"),
    ("precision_downgrade", "y = x.to(torch.float16)"),
    ("precision_downgrade", "y = x.to(dtype=torch.half)"),
    ("half_type", "__half h;"), ("half_type", "half2 h;"),
]


@pytest.mark.parametrize("rule,snippet", POSITIVE)
def test_rule_fires_on_the_right_line(rule, snippet):
    text = "x = 1\n\n" + snippet + "\ny = 2\n"
    assert (rule, 3) in hits(text)
    assert {n for _, n in hits(text)} == {3}


NEAR_MISSES = [
    "bypass = 1", "passed = True", "Pass::kForward", "compass()", "x = 1  # pass",
    "int a;  // try:", "retry: int = 3", "mbarrier.try_wait.parity", "except_count = 0",
    "class M(torch.nn.Module):", "p = torch.nn.Parameter(w)", "import torch.nn as nn",
    "torch.nn.init.zeros_(w)", "ms = torch.nn.ModuleList()", "y = torch.relu_(x)",
    "y = torch.clamp_min(x, 0)", "y = x.to(torch.float32)", "f = __half2float(h);",
    "torch.cuda.synchronize()", "t0 = time.time()", "s = torch.cuda.current_stream()",
    "class Stats(Base):", "h = x.half_width", "// __float2half(v)",
]


@pytest.mark.parametrize("snippet", NEAR_MISSES)
def test_near_misses_are_clean(snippet):
    assert hits(snippet) == []


def test_hash_cuts_inside_strings():
    # The checker's strip is naive: '#' and '//' cut the line even inside a string literal.
    assert hits('x = "# try:"') == []
    assert hits('url = "http://x"; pass') == []
    assert hits('x = "#"; pass') == []
    assert hits('x = "a"; pass') == [("code_bypass", 1)]


def test_precision_rules_only_in_fp32():
    snippet = "y = x.half()\n__half h;\n"
    assert hits(snippet, "fp32") == [("precision_downgrade", 1), ("half_type", 2)]
    assert hits(snippet, "float32") == hits(snippet, "FP32") == hits(snippet, "fp32")
    for precision in ("fp16", "bf16", "bfloat16"):
        assert hits(snippet, precision) == []


def test_multiline_match_is_reported_at_line_zero():
    # \s matches a newline in the whole-text search, so the checker flags this.
    errors, _ = check("x = 1\nexcept\n    ValueError\n", backend=None)
    assert [(rule, n) for rule, n, _ in errors] == [("code_bypass", 0)]
    assert "lines 2-3" in errors[0][2]


def test_one_hit_per_rule_and_line():
    errors, _ = check("try: pass\n", backend=None)
    assert errors == [("code_bypass", 1, "try: pass")]


CUDA_OK = "src = '''\n__global__ void k(float* x) { x[threadIdx.x] = 0; }\n'''\nload_inline(src)\n"


def test_cuda_requirements():
    assert check(CUDA_OK) == ([], [])
    for missing, replacement in [("__global__", "static"), ("load_inline", "compile"),
                                 ("threadIdx.x", "0")]:
        errors, _ = check(CUDA_OK.replace(missing, replacement))
        assert [(rule, n) for rule, n, _ in errors] == [("cuda_impl", 0)], missing
    errors, _ = check("// __global__ threadIdx.x load_inline\n")
    assert len(errors) == 3
    assert check(CUDA_OK.replace("threadIdx.x", "0").replace("void", "__device__ void")) == ([], [])
