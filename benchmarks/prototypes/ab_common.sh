# Sourced by the A/B device scripts (few_check_s23.sh, few_ab_s23.sh, next_s24.sh): the environment,
# $OUT/device.txt, and the two builds (instance_norm.py and .scratch/old.py) in parallel, each under
# its own module name, logs in $OUT/build_<file>.txt.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 INSTANCE_NORM_REQUIRE_GPU=1 TORCH_EXTENSIONS_DIR=/tmp/ext
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv; md5sum instance_norm.py .scratch/old.py; } > $OUT/device.txt 2>&1
for f in instance_norm.py .scratch/old.py; do
  python3 -c "import importlib.util,sys; s=importlib.util.spec_from_file_location('m_'+str(abs(hash('$f'))),'$f'); m=importlib.util.module_from_spec(s); s.loader.exec_module(m); m.load_extension()" > $OUT/build_$(basename $f).txt 2>&1 &
done
wait
