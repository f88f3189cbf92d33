#!/usr/bin/env bash
# Prepared in the twenty-seventh session (no carry): the data for a few-instance rule choosing the
# forward's wide stream plans (K=16, half the cluster; candidates since 506b992, never chosen).
#   run(command="bash benchmarks/prototypes/next_s32b.sh", timeout_s=600)
# s31/call5 (tune.py --match stream, 13 shapes): in graph replay K=16 gained 5-26 % at (2,8,384,384),
# (1,16,384,384), fp32 (1,8,512,512), fp32 (8,8,256,256) / (1,64,256,256), bf16 (2,16,320,320), and lost
# 11-16 % at (4,8,512,512) both types and fp32 (2,16,320,320), and 3-8 % at fp32 (1,3,512,512). No rule
# of waves, vectors a thread or evenness fitted all of them (benchmarks/NOTES.md, twenty-seventh
# session). This grid: (1, I, S, S) for I in 2..64 instances and S in 256..512, both dtypes, every
# stream plan's time (tune.py --top 40), graph replay and do_bench.
set -uo pipefail
START=$SECONDS
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 INSTANCE_NORM_REQUIRE_GPU=1 TORCH_EXTENSIONS_DIR=/tmp/ext MAX_JOBS=8
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv; md5sum instance_norm.py; } > $OUT/device.txt 2>&1
timeout 300 python3 -c "import instance_norm; instance_norm.load_extension()" > $OUT/build.txt 2>&1 || { tail -5 $OUT/build.txt; exit 1; }
echo "built at $((SECONDS - START)) s"
SH=$(python3 -c "print(','.join(f'1x{i}x{s}x{s}' for s in (256, 320, 384, 448, 512) for i in (2, 4, 8, 16, 24, 32, 48, 64)))")
timeout 270 python3 benchmarks/tune.py --graph --shapes $SH --dtypes float32,bfloat16 --match stream --top 40 > $OUT/grid_graph.txt 2>&1
echo "graph at $((SECONDS - START)) s"
timeout $((585 - (SECONDS - START))) python3 benchmarks/tune.py --shapes $SH --dtypes float32,bfloat16 --match stream --top 40 > $OUT/grid_dobench.txt 2>&1
echo "do_bench at $((SECONDS - START)) s"
grep -c "forward act" $OUT/grid_graph.txt $OUT/grid_dobench.txt
