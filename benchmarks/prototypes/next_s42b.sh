#!/usr/bin/env bash
# Prepared in the thirty-seventh session, for issue 13: what a training step at tiny instances spends beyond its two
# norm kernels (fp32 (1024,256,4,4): 44.8 us graph replay against forward 6.8 + backward 14.0, s41). Every kernel of
# one step with its device time (torch.profiler, eager steps), their sum, and the graph replay time; ours and
# nn.InstanceNorm2d, fp32 and bf16. About 60 s after the build.
#   run(command="bash benchmarks/prototypes/next_s42b.sh", timeout_s=400)
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 TORCH_EXTENSIONS_DIR=/tmp/ext MAX_JOBS=16
START=$SECONDS
python3 -c "import instance_norm; instance_norm.load_extension()" > $OUT/build.txt 2>&1
echo "built rc=$? at $((SECONDS - START)) s"
md5sum instance_norm.py > $OUT/md5.txt
for m in ours torch; do
  for d in float32 bfloat16; do
    timeout 120 python3 benchmarks/step_kernels.py --module $m --dtype $d --shapes 1024x256x4x4,64x256x7x7,1024x256x7x7,4096x256x2x2 \
      >> $OUT/step_kernels.txt 2>&1
  done
done
echo "done at $((SECONDS - START)) s"; grep -E "graph replay|kernels' sum" $OUT/step_kernels.txt
