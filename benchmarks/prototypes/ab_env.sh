# Sourced by the A/B device scripts from the thirty-second session on (each repeated these lines before): the
# environment every device script runs with, then patch_ab_build.sh's builds of the repository's file and of
# each NAME PATCH variant under /tmp/vab/NAME (exits the calling script when a patch or a build fails). Sets START.
#   source benchmarks/prototypes/ab_env.sh NAME PATCH [NAME2 PATCH2 ...]
START=$SECONDS
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 INSTANCE_NORM_REQUIRE_GPU=1 TORCH_EXTENSIONS_DIR=/tmp/ext MAX_JOBS=16
bash benchmarks/prototypes/patch_ab_build.sh "$@" || exit 1
echo "built at $((SECONDS - START)) s"
