"""Writes an instrumented copy of instance_norm.py: std::chrono::steady_clock marks along the C++ host
path of the forward and backward ops, read (and reset) by an extra `prof_read() -> float[]` op: 32
accumulated microseconds, then 32 hit counts. A dev tool (eighth session; never in the product): the
anchors below are exact source lines, and the script stops at the first one that no longer matches.

    python benchmarks/instrument_host.py instance_norm.py /tmp/inst.py
    python benchmarks/host_ab.py instance_norm.py,/tmp/inst.py     # the last version's marks are printed
"""
import sys
src = open(sys.argv[1]).read()
HEAD = '''#define IN_CHECK(cond, ...) TORCH_CHECK_WITH(Error, cond, __VA_ARGS__)
#include <chrono>
namespace inprof {
inline double T[32];
inline int64_t H[32];
inline std::chrono::steady_clock::time_point last;
inline void start() { last = std::chrono::steady_clock::now(); }
inline void mark(int i) {
  auto n = std::chrono::steady_clock::now();
  T[i] += std::chrono::duration<double, std::micro>(n - last).count(); H[i]++; last = n;
}
}
'''
def sub(old, new, count=1):
    global src
    n = src.count(old)
    assert n == count, (old, n)
    src = src.replace(old, new)
def marks_between(block, marks):
    """`block` (exact source lines) with `inprof::mark(m);` put before its line i for each {i: m}."""
    lines = block.split("\n")
    out = []
    for i, line in enumerate(lines):
        if i in marks:
            out.append(f"  inprof::mark({marks[i]});")
        out.append(line)
    sub(block, "\n".join(out))
sub('#define IN_CHECK(cond, ...) TORCH_CHECK_WITH(Error, cond, __VA_ARGS__)\n', HEAD)
# forward
sub('''  if (!wants_grad({&x}, {&weight, &bias, &residual})) {
    return NormFunction::below(x, weight, bias, residual, eps, act, slope, stats);
  }
  const variable_list out = NormFunction::apply(x, weight, bias, residual, eps, act, slope);
  return {out[0], out[1]};''',
'''  inprof::start();
  const bool wg = wants_grad({&x}, {&weight, &bias, &residual});
  inprof::mark(0);
  if (!wg) { auto r = NormFunction::below(x, weight, bias, residual, eps, act, slope, stats); inprof::mark(12); return r; }
  const variable_list out = NormFunction::apply(x, weight, bias, residual, eps, act, slope);
  inprof::mark(15);
  return {out[0], out[1]};''')
sub('''    auto [y, stats] = below(x, weight, bias, residual, eps, act, slope, true);
    ctx->save_for_backward({x, weight.value_or(at::Tensor()), bias.value_or(at::Tensor()), stats});
    save_epilogue(ctx, eps, act, slope, residual);
    ctx->mark_non_differentiable({stats});''',
'''    inprof::mark(13);
    auto [y, stats] = below(x, weight, bias, residual, eps, act, slope, true);
    inprof::mark(12);
    ctx->save_for_backward({x, weight.value_or(at::Tensor()), bias.value_or(at::Tensor()), stats});
    save_epilogue(ctx, eps, act, slope, residual);
    ctx->mark_non_differentiable({stats});
    inprof::mark(14);''')
marks_between('''  check_input(input);
  c10::cuda::CUDAGuard guard(input.device());
  const Shape shape = shape_of(input);
  const Plan plan = plan_for(input, shape, Direction::kForward, forced, epilogue_of(epi));
  at::Tensor x = input_for(input, plan);
  at::Tensor y = empty_output(x, plan.channels_last());
  // The statistics only when the caller wants them (autograd, running statistics) or the plan reads''',
              {0: 1, 2: 2, 3: 3, 4: 4, 5: 5, 6: 6})
sub('''  const at::Tensor returned = want_stats ? stats : at::empty({0}, acc);
''', '''  const at::Tensor returned = want_stats ? stats : at::empty({0}, acc);
  inprof::mark(7);
''')
sub('''  run(plan, pr);
  return {y, returned};''', '''  inprof::mark(8);
  run(plan, pr);
  inprof::mark(11);
  return {y, returned};''')
sub('''  C10_CUDA_CHECK(launch_plan(plan, problem, launch, workspace.defined() ? workspace.data_ptr() : nullptr, stream));
  C10_CUDA_KERNEL_LAUNCH_CHECK();''', '''  inprof::mark(9 + 16 * (problem.direction == Direction::kBackward));
  C10_CUDA_CHECK(launch_plan(plan, problem, launch, workspace.defined() ? workspace.data_ptr() : nullptr, stream));
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  inprof::mark(10 + 16 * (problem.direction == Direction::kBackward));''')
# backward
sub('''  const variable_list out = Refusing<BackwardCall>::apply(grad_out, x, weight, bias, stats, act, slope);
  return {out[0], out[1], out[2]};''', '''  inprof::start();
  const variable_list out = Refusing<BackwardCall>::apply(grad_out, x, weight, bias, stats, act, slope);
  inprof::mark(23);
  return {out[0], out[1], out[2]};''')
sub('''    at::AutoDispatchBelowADInplaceOrView below;
    auto [dx, dweight, dbias] = Call::op().call(std::forward<Args>(args)...);''',
'''    inprof::mark(16);
    at::AutoDispatchBelowADInplaceOrView below;
    auto [dx, dweight, dbias] = Call::op().call(std::forward<Args>(args)...);
    inprof::mark(22);''')
sub('''  const Shape shape = shape_of(input);
  const Plan plan = plan_for(input, shape, Direction::kBackward, forced, epilogue_of(epi));
  at::Tensor x = input_for(input, plan);
  at::Tensor stats = stats_in.contiguous();
  at::Tensor dx = empty_output(x, plan.channels_last());
  at::Tensor sums = at::empty({2, P}, x.options().dtype(acc));''', '''  inprof::mark(17);
  const Shape shape = shape_of(input);
  const Plan plan = plan_for(input, shape, Direction::kBackward, forced, epilogue_of(epi));
  inprof::mark(18);
  at::Tensor x = input_for(input, plan);
  at::Tensor stats = stats_in.contiguous();
  at::Tensor dx = empty_output(x, plan.channels_last());
  at::Tensor sums = at::empty({2, P}, x.options().dtype(acc));
  inprof::mark(19);''')
sub('''  if (x.numel() > 0) run(plan, pr);
  auto [dweight, dbias] = channel_gradients(pr, weight, bias, x);
  return {dx, dweight, dbias};''', '''  inprof::mark(20);
  if (x.numel() > 0) run(plan, pr);
  inprof::mark(21);
  auto [dweight, dbias] = channel_gradients(pr, weight, bias, x);
  inprof::mark(27);
  return {dx, dweight, dbias};''', 2)
sub('''  m.def("describe_plan(int[] plan) -> str", &INSTANCE_NORM_NS::describe_plan);''',
'''  m.def("describe_plan(int[] plan) -> str", &INSTANCE_NORM_NS::describe_plan);
  m.def("prof_read() -> float[]", +[]() {
    std::vector<double> out(inprof::T, inprof::T + 32);
    for (int i = 0; i < 32; ++i) { out.push_back(double(inprof::H[i])); inprof::T[i] = 0; inprof::H[i] = 0; }
    return out;
  });''')
open(sys.argv[2], "w").write(src)
