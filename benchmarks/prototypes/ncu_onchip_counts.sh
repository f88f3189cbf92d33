#!/usr/bin/env bash
# ncu counts of one no-grad ModelNew forward at fp32 (8,512,32,32) (the onchip(K=8,G=32) plan) for each
# instance_norm.py-like FILE given, into $OUT/ncu_<name>.txt. Used by next_s24.sh and next_s25.sh.
# usage: ncu_onchip_counts.sh SECONDS_EACH FILE...
each=$1; shift
for f in "$@"; do
  n=$(basename $f .py)
  timeout $each ncu --clock-control none --nvtx --nvtx-include "measure/" --metrics smsp__inst_executed.sum,gpu__time_duration.sum,launch__registers_per_thread,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__warps_active.avg.pct_of_peak_sustained_active,dram__throughput.avg.pct_of_peak_sustained_elapsed \
    python3 -c "
import importlib.util, torch
s = importlib.util.spec_from_file_location('mm', '$f'); m = importlib.util.module_from_spec(s); s.loader.exec_module(m); m.load_extension()
x = torch.randn(8, 512, 32, 32, device='cuda'); mod = m.ModelNew(512).cuda()
with torch.no_grad():
    for _ in range(5): mod(x)
    torch.cuda.synchronize(); torch.cuda.nvtx.range_push('measure'); mod(x); torch.cuda.nvtx.range_pop(); torch.cuda.synchronize()
" > $OUT/ncu_$n.txt 2>&1
done
grep -H "inst_executed\|duration\|registers\|issue_active\|warps_active\|dram__" $OUT/ncu_*.txt
