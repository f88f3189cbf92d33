#!/usr/bin/env bash
# The twenty-third session's variants of instance_norm.py, made in /tmp/v/{lf,rc,lfr} from the repository's
# patches (run from the repository root).
set -euo pipefail
rm -rf /tmp/v && mkdir -p /tmp/v
for v in lf rc lfr; do
  mkdir -p /tmp/v/$v && cp instance_norm.py /tmp/v/$v/
  ( cd /tmp/v/$v && git init -q
    case $v in
      lf) git apply "$OLDPWD/benchmarks/prototypes/loads_first_s26.patch" ;;
      rc) git apply "$OLDPWD/benchmarks/prototypes/recip_s27.patch" ;;
      lfr) git apply "$OLDPWD/benchmarks/prototypes/loads_first_s26.patch" && git apply "$OLDPWD/benchmarks/prototypes/recip_s27.patch" ;;
    esac )
done
md5sum /tmp/v/*/instance_norm.py
