#!/usr/bin/env bash
# Twentieth session, call 5: the backward's stream order by crowd (AheadOrder): the plans it picks,
# A/B of the training step against the commit before it (.scratch/old.py), then the whole GPU suite.
set -uo pipefail
END=$((SECONDS + 590))
source benchmarks/prototypes/ab_common.sh  # environment, device.txt, both builds
timeout 60 python3 -m pytest -q -x tests/test_gpu.py -k "chosen_plans" -p no:cacheprovider > $OUT/pytest_plans.txt 2>&1; echo "rc=$?" >> $OUT/pytest_plans.txt
S=32x3x224x224,1x64x256x256,2x32x160x160,1x100x224x224,4x64x160x160,8x24x224x224,2x100x256x256
timeout 60 python3 benchmarks/tune.py --graph --backward --match stream --shapes $S --dtypes float32,bfloat16 --top 2 > $OUT/tune_bwd.txt 2>&1
timeout 120 python3 benchmarks/prototypes/pdl_ab_s21.py old=.scratch/old.py new=instance_norm.py --rounds 3 --cases train \
  --dtypes float32,bfloat16 --shapes $S > $OUT/ab.txt 2>&1; echo "rc=$?" >> $OUT/ab.txt
tail -2 $OUT/pytest_plans.txt; grep -h "default" $OUT/tune_bwd.txt; cut -c1-120 $OUT/ab.txt
timeout $((END - SECONDS - 5)) python3 -m pytest -q tests/ -p no:cacheprovider > $OUT/pytest.txt 2>&1; echo "rc=$?" >> $OUT/pytest.txt
tail -3 $OUT/pytest.txt
