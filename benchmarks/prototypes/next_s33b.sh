#!/usr/bin/env bash
# Prepared in the twenty-eighth session (no carry): multi_cta with smaller chunks at few-instance shapes
# in CUDA-graph replay (L2 warm), where torch.compile beat us (fp32 (2,8,384,384): compile 8.56 us, our
# best plan multi_cta 10.3, the default stream 12.6; s32/call6-7). chunk4 / chunk2: kChunkVectorsPerThread
# 8 -> 4 / 2 (32 / 16 KB float32 chunks: two / four times the CTAs per instance). tune.py --graph
# --match multi_cta on each build (--module), and the base's every plan, forward and backward.
#   run(command="bash benchmarks/prototypes/next_s33b.sh", timeout_s=600)
set -uo pipefail
source benchmarks/prototypes/device_base.sh  # the base's build (cached: patch_ab_build.sh builds it again at once)
bash benchmarks/prototypes/patch_ab_build.sh chunk4 benchmarks/prototypes/chunk4_s33.patch \
  chunk2 benchmarks/prototypes/chunk2_s33.patch || exit 1
echo "variants built at $((SECONDS - START)) s"
SH=1x8x512x512,2x8x384x384,4x8x384x384,1x32x256x256,2x16x320x320,1x16x448x448,1x2x4096x4096
for dir in "" --backward; do
  timeout 100 python3 benchmarks/tune.py --graph $dir --shapes $SH --dtypes float32,bfloat16 --top 40 > $OUT/base$dir.txt 2>&1
  for v in chunk4 chunk2; do
    timeout 100 python3 benchmarks/tune.py --graph $dir --module /tmp/vab/$v/instance_norm.py --match multi_cta \
      --shapes $SH --dtypes float32,bfloat16 --top 2 > $OUT/$v$dir.txt 2>&1
  done
  echo "tune$dir at $((SECONDS - START)) s"
done
python3 - "$OUT" <<'PY'
import re, sys, os
out = sys.argv[1]
H = re.compile(r"(\w+) \(([\d, ]+)\) (forward|backward)\S* .*default=(\S+)")
R = re.compile(r"^\s+(\S+)\s+([\d.]+) ms")
def parse(path):
    rows, key = {}, None
    for line in open(path):
        h = H.match(line)
        if h: key = (h.group(1), h.group(2), h.group(3)); rows[key] = {}; continue
        r = R.match(line)
        if r and key: rows[key][r.group(1)] = float(r.group(2))
    return rows
for d in ("", "--backward"):
    b = parse(f"{out}/base{d}.txt"); v4 = parse(f"{out}/chunk4{d}.txt"); v2 = parse(f"{out}/chunk2{d}.txt")
    for k, t in b.items():
        print(k, "default", t.get("default"), "multi_cta", t.get("multi_cta"), "chunk4", v4.get(k, {}).get("multi_cta"),
              "chunk2", v2.get(k, {}).get("multi_cta"))
PY
(cd $OUT && tar czf logs.tgz build*.txt device.txt && rm -f build*.txt device.txt)
