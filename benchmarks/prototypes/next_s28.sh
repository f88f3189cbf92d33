#!/usr/bin/env bash
# Prepared in the twenty-third session for the next one's first device call (no carry needed):
#   run(command="bash benchmarks/prototypes/next_s28.sh", timeout_s=600)
# Four builds, made from the repository's patches in /tmp (.scratch does not survive a session):
#   base  instance_norm.py as committed
#   lf    prototypes/loads_first_s26.patch: the backward's data loads before its per-instance prologue
#         (twenty-third session: plain small backward 0.79-0.95x in graph replay, one affine row 1.16x)
#   rc    prototypes/recip_s27.patch: instance_size as acc_t and its reciprocal computed on the host
#         (Params.count / inv_count): no int64 conversion or IEEE division after the reduction
#   lfr   lf + rc
# A/B on the backward rows of the twenty-third session's calls 3-4 and the forward rows rc touches, then
# Nsight Compute with the L2 warm (--cache-control none) on the affine bf16 (8,512,32,32) backward, base
# against lf: where lf's 1.16x in graph replay comes from (ncu with the L2 flushed saw 3 %).
# The suite on a winner is the second call (next_s28b.sh VARIANT).
set -uo pipefail
START=$SECONDS
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 INSTANCE_NORM_REQUIRE_GPU=1 TORCH_EXTENSIONS_DIR=/tmp/ext MAX_JOBS=4
bash benchmarks/prototypes/variants_s27.sh || exit 1
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv; md5sum instance_norm.py /tmp/v/*/instance_norm.py; } > $OUT/device.txt 2>&1
for v in lf rc lfr; do
  python3 -c "import importlib.util; s=importlib.util.spec_from_file_location('$v','/tmp/v/$v/instance_norm.py'); m=importlib.util.module_from_spec(s); s.loader.exec_module(m); m.load_extension(); print('built')" > $OUT/build_$v.txt 2>&1 &
done
python3 -c "import instance_norm; instance_norm.load_extension(); print('built')" > $OUT/build.txt 2>&1
wait; echo "built at $((SECONDS - START)) s"
for f in $OUT/build*.txt; do grep -q built $f || { echo "build failed $f"; tail -5 $f; exit 1; }; done
AB="timeout 150 python3 benchmarks/prototypes/pdl_ab_s21.py base=instance_norm.py lf=/tmp/v/lf/instance_norm.py rc=/tmp/v/rc/instance_norm.py lfr=/tmp/v/lfr/instance_norm.py --rounds 3"
{
$AB --cases bwd,bwdaff --dtypes bfloat16,float16,float32 --shapes 8x512x32x32
$AB --cases bwd,bwdaff --dtypes bfloat16,float32 --shapes 32x256x32x32,1x16x64x64,4x128x128x128,64x256x7x7
$AB --cases train --dtypes bfloat16 --shapes 8x512x32x32
$AB --cases acttrain --dtypes float32 --shapes 8x512x32x32,1x16x64x64
$AB --cases fwd --dtypes float32,bfloat16 --shapes 8x512x32x32,1x16x64x64,64x256x7x7,32x3x224x224
$AB --cases fwd,bwd --dtypes float16,bfloat16 --shapes 8x512x32x32 --layout cl  # rc: cl_onchip fp16 K=2 forward spills 20 bytes (ptxas)
} > $OUT/ab.txt 2>&1
echo "ab done at $((SECONDS - START)) s"
python3 - <<'PY' | tee $OUT/verdict.txt
import math, re, os, collections
rows = collections.defaultdict(list)
for l in open(os.environ['OUT'] + '/ab.txt'):
    for m in re.finditer(r'(\w+)/base ([0-9.a-z]+)/([0-9.a-z]+)', l):
        rows[m.group(1)].append((float(m.group(3)), l.split('|')[0].strip()))
for n, r in rows.items():
    v = [x for x, _ in r]
    g = math.exp(sum(map(math.log, v)) / len(v)) if all(x == x for x in v) else float('nan')
    win = len(r) == 37 and g <= 0.99 and max(v) <= 1.02   # every row (a failed one is nan), none above 1.02
    print(f'{n}: rows {len(r)} geomean(graph) {g:.3f} {"WINNER" if win else "no"}; worst ' +
          '; '.join(f'{x:.3f} {t}' for x, t in sorted(r, reverse=True)[:3]))
PY
mkdir -p $OUT/ncu
for v in base:instance_norm.py lf:/tmp/v/lf/instance_norm.py; do
  timeout 70 ncu --cache-control none --clock-control none --profile-from-start off \
    --section LaunchStats --section Occupancy --section SpeedOfLight --section WarpStateStats --section MemoryWorkloadAnalysis \
    python3 benchmarks/prototypes/ncu_aff_s27.py ${v#*:} 8 512 32 32 bfloat16 > $OUT/ncu/aff_bf16_warm_${v%%:*}.txt 2>&1
done
echo "ncu done at $((SECONDS - START)) s"
grep -h "Duration\|Warp Cycles Per Issued\|L2 Hit Rate\|Achieved Occupancy" $OUT/ncu/*.txt | head -24
tar czf $OUT/ncu.tgz -C $OUT ncu; rm -rf $OUT/ncu
