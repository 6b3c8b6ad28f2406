# Shared by the GPU-session scripts (run on the lent GPU machine from the repository root).
set -u
export PYTHONUNBUFFERED=1
PY=${PY:-/opt/torch/.venv/bin/python3}
W=/tmp/gpuw                      # work dir on the GPU machine
L=$W/logs; R=$W/results
mkdir -p "$L" "$R"
T0=${T0:-$(date +%s)}
DEADLINE=${DEADLINE:-560}        # seconds after T0 by which every step must have ended
stamp() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a "$L/timeline.txt"; }
pack() {  # everything small enough into $OUT/<name>.tgz (redone after each step: a kill loses nothing)
  ( cd "$W" && find logs results -type f -size -3M -print0 | tar czf "$OUT/$1.tgz" --null -T - ) 2>/dev/null
}
# step NAME LIMIT CMD...: run CMD with at most LIMIT seconds (less when the deadline is nearer)
step() {
  local name=$1 limit=$2; shift 2
  local left=$(( DEADLINE - ($(date +%s) - T0) ))
  if (( left < 25 )); then stamp "SKIP $name (only ${left}s left)"; return 0; fi
  (( limit > left )) && limit=$left
  stamp "START $name (limit ${limit}s)"
  timeout -s INT -k 15 "$limit" "$@" > "$L/$name.log" 2>&1
  local rc=$?
  stamp "END $name rc=$rc"
  tail -n 25 "$L/$name.log" | sed "s/^/    [$name] /"
  pack "${PACK:-run}"
  return 0
}
install_ansible() {
  $PY -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/ans \
    .whl/ansible_core-*.whl .whl/resolvelib-*.whl .whl/cryptography-*.whl .whl/cffi-*.whl \
    .whl/pycparser-*.whl
}
ansible_playbook() { .gpu/ap.sh "$@"; }
jpeg_folder() {  # ROOT IMAGES: ImageNet-like JPEGs (500x375) made by 8 parallel writers, 12 classes each
  local root=$1 images=$2 per=$(( $2 / 8 ))
  rm -rf "$root" "$root.parts"; mkdir -p "$root"
  for i in 0 1 2 3 4 5 6 7; do
    $PY -m bench.datasets make-jpeg-folder "$root.parts/$i" --images $per --size 500x375 \
      --classes 12 --seed $i &
  done
  wait
  for i in 0 1 2 3 4 5 6 7; do
    for d in "$root.parts/$i"/class_*; do mv "$d" "$root/p${i}_$(basename "$d")"; done
  done
  rm -rf "$root.parts"
  echo "$(find "$root" -name '*.JPEG' | wc -l) JPEGs, $(du -sh "$root" | cut -f1)"
}
versions() {
  nvidia-smi; nvidia-smi -q | head -40
  $PY - <<'PY'
import torch, torchvision, platform
print("python", platform.python_version())
print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version())
print("nccl", torch.cuda.nccl.version(), "torchvision", torchvision.__version__)
print("gpu", torch.cuda.get_device_name(0), torch.cuda.get_device_capability(0))
import triton; print("triton", triton.__version__)
PY
  /usr/local/cuda/bin/nvcc --version | tail -2
  grep -E "define NCCL_(MAJOR|MINOR|PATCH)" /usr/include/nccl.h
  g++ --version | head -1; nproc; free -g | head -2; cat /etc/os-release | head -3
}
