#!/usr/bin/env bash
# Twenty-ninth session: next_s33b.sh cut to one call (base and both variants built in parallel, tight
# timeouts; next_s33.sh's every-plan map is the base's --top 40). multi_cta with kChunkVectorsPerThread
# 4 / 2 (chunk4_s33.patch / chunk2_s33.patch) against the base's every plan, graph replay (L2 warm),
# forward and backward, 6 few-instance shapes, both dtypes.
#   run(command="bash benchmarks/prototypes/next_s33c.sh", timeout_s=600)
set -uo pipefail
START=$SECONDS
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 INSTANCE_NORM_REQUIRE_GPU=1 TORCH_EXTENSIONS_DIR=/tmp/ext MAX_JOBS=16
bash benchmarks/prototypes/patch_ab_build.sh chunk4 benchmarks/prototypes/chunk4_s33.patch \
  chunk2 benchmarks/prototypes/chunk2_s33.patch || exit 1
echo "built at $((SECONDS - START)) s"
SH=1x8x512x512,2x8x384x384,4x8x384x384,1x32x256x256,2x16x320x320,1x16x448x448
left() { echo $(( (570 - (SECONDS - START)) / $1 )); }
for dir in "" --backward; do
  n=$([ -z "$dir" ] && echo 6 || echo 3)
  timeout $(left $n) python3 benchmarks/tune.py --graph $dir --shapes $SH --dtypes float32,bfloat16 --top 40 > $OUT/base$dir.txt 2>&1
  for v in chunk4 chunk2; do
    timeout $(left $((n - 1))) python3 benchmarks/tune.py --graph $dir --module /tmp/vab/$v/instance_norm.py --match multi_cta \
      --shapes $SH --dtypes float32,bfloat16 --top 2 > $OUT/$v$dir.txt 2>&1
    n=$((n - 1))
  done
  echo "tune$dir at $((SECONDS - START)) s"
done
python3 - "$OUT" <<'PY'
import re, sys
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
        best = min(t.items(), key=lambda kv: kv[1]) if t else None
        print(k, "default", t.get("default"), "best", best, "multi_cta", t.get("multi_cta"),
              "chunk4", v4.get(k, {}).get("multi_cta"), "chunk2", v2.get(k, {}).get("multi_cta"))
PY
(cd $OUT && tar czf logs.tgz build*.txt device.txt && rm -f build*.txt device.txt)
