# Sourced by the next_s3x device scripts (twenty-eighth session; each repeated these lines): the
# environment every device script runs with, $OUT/device.txt (date, GPU, driver, md5 of the file), and
# the repository's build ($OUT/build.txt; exits the calling script when it fails). Sets START.
#   source benchmarks/prototypes/device_base.sh
START=$SECONDS
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 INSTANCE_NORM_REQUIRE_GPU=1 TORCH_EXTENSIONS_DIR=/tmp/ext MAX_JOBS=16
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv; md5sum instance_norm.py; } > $OUT/device.txt 2>&1
timeout 300 python3 -c "import instance_norm; instance_norm.load_extension()" > $OUT/build.txt 2>&1 || { tail -5 $OUT/build.txt; exit 1; }
echo "built at $((SECONDS - START)) s"
