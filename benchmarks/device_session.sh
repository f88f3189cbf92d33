#!/usr/bin/env bash
# One device call: cold build (timed), the GPU tests, then the benchmark modes named as arguments
# (e.g. "fused --quick"), each with its log under $OUT. Usage on the device machine:
#   bash benchmarks/device_session.sh [tests|notests] [bench args ...]
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT/logs"
export PYTHONUNBUFFERED=1 INSTANCE_NORM_REQUIRE_GPU=1 TORCH_EXTENSIONS_DIR=/tmp/ext
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$OUT/logs/device.txt" 2>&1
python3 -c "import torch; print(torch.__version__, torch.version.cuda)" >> "$OUT/logs/device.txt"
python3 -c "import time; t = time.time(); import instance_norm; instance_norm.load_extension(); print(f'cold build + load {time.time() - t:.1f} s')" > "$OUT/logs/build.txt" 2>&1
mode="${1:-tests}"; shift || true
if [ "$mode" = tests ]; then
  timeout 420 python3 -m pytest tests -q -rs -p no:cacheprovider > "$OUT/logs/pytest.txt" 2>&1
  echo "pytest rc=$?" >> "$OUT/logs/pytest.txt"
fi
if [ "$#" -gt 0 ]; then
  python3 benchmarks/bench.py --out "$OUT/results" "$@" > "$OUT/logs/bench.txt" 2>&1
  echo "bench rc=$?" >> "$OUT/logs/bench.txt"
fi
tail -3 "$OUT/logs/pytest.txt" 2>/dev/null; cat "$OUT/logs/build.txt"; tail -5 "$OUT/logs/bench.txt" 2>/dev/null
# At most 8 files come back from the device: everything travels as one archive.
tar czf "$OUT/session.tgz" -C "$OUT" logs $( [ -d "$OUT/results" ] && echo results ) && rm -rf "$OUT/logs" "$OUT/results"
