#!/usr/bin/env bash
# The CuTe-DSL peer (bench.py --cute: quack's LayerNorm) on the device, which has no package index.
# Its wheels (quack-kernels 0.6.5, nvidia-cutlass-dsl 4.8.1 with its cu12 libraries, apache-tvm-ffi,
# torch-c-dlpack-ext) are 72 MB even with the 92 MB libraries wheel repacked as tar.xz, over the 64 MiB
# a device call may carry, so they travel in two calls while the machine stays warm (it keeps /tmp):
#   here:     bash benchmarks/quack_wheels.sh pack        # fills .whlA/ and .whlB/ (.gitignore)
#   device:   bash benchmarks/quack_wheels.sh stash       # call 1, carry [".whlA"]: to /tmp/quack_parts
#             source benchmarks/quack_wheels.sh install   # call 2, carry [".whlB"]: installs to /tmp/site
#                                                         # and sets PYTHONPATH (with the .pth's folder)
set -uo pipefail
PARTS=/tmp/quack_parts SITE=/tmp/site
case "${1:-}" in
  pack)
    w=$(mktemp -d)
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
      --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 -d "$w" \
      quack-kernels==0.6.5 nvidia-cutlass-dsl==4.8.1 nvidia-cutlass-dsl-libs-base==4.8.1 \
      nvidia-cutlass-dsl-libs-core==4.8.1 nvidia-cutlass-dsl-libs-cu12==4.8.1 apache-tvm-ffi==0.1.15.post2 \
      torch-c-dlpack-ext==0.1.5 || exit 1
    mkdir -p "$w/cu12" && (cd "$w/cu12" && unzip -q ../nvidia_cutlass_dsl_libs_cu12-*.whl) && rm "$w"/nvidia_cutlass_dsl_libs_cu12-*.whl
    rm -rf .whlA .whlB && mkdir -p .whlA .whlB
    tar cf - -C "$w/cu12" . | xz -9 -T0 | split -b 31M - .whlA/cu12.tar.xz.
    mv .whlA/cu12.tar.xz.ab .whlB/ && mv "$w"/*.whl .whlA/ && rm -rf "$w"
    du -sh .whlA .whlB ;;
  stash)
    mkdir -p $PARTS && cp .whlA/* $PARTS/ && ls $PARTS ;;
  install)
    [ -f $PARTS/cu12.tar.xz.aa ] || { echo "no $PARTS/cu12.tar.xz.aa: the machine was released after the stash call"; return 1 2>/dev/null || exit 1; }
    [ -f .whlB/cu12.tar.xz.ab ] || { echo "no .whlB/cu12.tar.xz.ab: carry .whlB"; return 1 2>/dev/null || exit 1; }
    # Wheels first (pip --target would skip a top-level folder that exists, nvidia_cutlass_dsl), then the
    # libraries' files into it; any failed step stops the install.
    cp .whlB/* $PARTS/ && rm -rf $SITE && mkdir -p $SITE &&
      python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target $SITE $PARTS/*.whl &&
      cat $PARTS/cu12.tar.xz.a? | xz -d | tar xf - -C $SITE || { echo "install failed"; return 1 2>/dev/null || exit 1; }
    export PYTHONPATH=$SITE:$SITE/nvidia_cutlass_dsl/dsl_packages:${PYTHONPATH:-}  # the .pth's line
    python3 -c "import quack, cutlass; print('quack', quack.__version__, 'cutlass-dsl ok')" ;;
  *) echo "usage: quack_wheels.sh pack|stash|install"; return 2 2>/dev/null || exit 2 ;;
esac
