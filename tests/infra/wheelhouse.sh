#!/usr/bin/env bash
# Fill what the python_env/horovod/conda molecule scenarios install from, so the containers need no
# PyPI and no GitHub and every run installs the same files:
#   .work/www/wheels/      a pip find-links directory (cp311, manylinux x86_64): CPU torch and
#                          everything the python_env and horovod roles install, plus Horovod's sdist
#   .work/www/wheels-cu13/ a second find-links directory for the horovod scenario (cp313, for its
#                          Debian 13 host): PyPI's torch 2.13.0, which is
#                          the CUDA 13.0 build, with the nvidia-* wheels it depends on (NCCL among
#                          them), PyPI's nvcc/cudart/cccl of the same CUDA 13.0 (`cuda-toolkit` extras),
#                          CuPy for CUDA 13 (compat.yml's cupy-cuda13x release, ~66 MB),
#                          tensorflow-cpu (constraints.txt's pin, 274 MB) and its dependencies,
#                          the other packages and Horovod's sdist. Kept apart because pip prefers
#                          2.13.0+cpu over 2.13.0 for `torch==2.13.0` when both lie in one directory.
#   .work/www/installers/  TEST FIXTURE installers with their .sha256 files (see molecule/conda/files),
#                          and a TEST FIXTURE stand-in source tarball for nccl-tests (see below)
# Downloads go to $GPURIG_CACHE/wheelhouse (default ~/.cache/gpurig) once per machine and are
# hard-linked (or copied) into .work/www. A stamp of the pins below skips pip entirely on a re-run.
# Environment: GPURIG_CACHE, PYTHON (a pip to download with; default .venv/bin/python),
#              GPURIG_TORCH_WHEEL_DIR (where the CPU torch wheel lies; default /opt/wheels).
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
cache=${GPURIG_CACHE:-$HOME/.cache/gpurig}/wheelhouse
www=$here/.work/www
python=${PYTHON:-$here/.venv/bin/python}
torch_wheels=${GPURIG_TORCH_WHEEL_DIR:-/opt/wheels}

# The containers' interpreter is Debian 12's CPython 3.11 (also in the Ubuntu 20.04 stand-in).
target=(--python-version 3.11 --implementation cp --abi cp311 --abi abi3 --abi none
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64
        --platform manylinux2014_x86_64 --platform any)
# Exact versions (the ones this repository's .venv is tested with); dependencies resolve once, then stay cached.
binaries=(
  torch==2.13.0+cpu torchvision==0.28.0
  numpy==2.4.6 pandas==3.1.1 pyarrow==26.0.1 matplotlib==3.11.2 nvidia-ml-py==13.615.71 tqdm==4.70.1
  scipy==1.17.1
  setuptools==84.2.1 wheel==0.48.0 packaging==26.3
  cloudpickle==3.1.2 psutil==7.2.2 pyyaml==6.0.3 cffi==2.1.1
)
sources=(horovod==0.28.1)
# The CUDA build of torch on PyPI is CUDA 13.0 (its nvidia-*-cu13 dependencies): the NCCL Horovod
# variant is compiled against that major, with nvcc and cudart from the same CUDA 13.0 release.
# CuPy: the wheel and release compat.yml names for CUDA 13 (tests/unit/test_compat.py keeps them equal).
cuda_stack=(torch==2.13.0 torchvision==0.28.0 "cuda-toolkit[nvcc,cudart,cccl]==13.0.3.0" cupy-cuda13x==14.2.0)
# TensorFlow's CPU build for the scenario's TensorFlow environment (python_env_install_tensorflow), at the
# pin constraints.txt holds for the tf launcher's tests (the release compat.yml names), with its
# dependencies (keras, h5py, grpcio, ...), resolved in the same download so they fit the pins above.
tensorflow=("$(grep -E '^tensorflow-cpu==' "$here/constraints.txt")")
cuda_pythons=(313)
# A second, older NCCL of the same major: the horovod scenario unpacks its libnccl.so.2 where Ubuntu's
# libnccl2 puts it, to show which of two real NCCLs a torch process loads.
system_nccl=(nvidia-nccl-cu13==2.28.3)

mkdir -p "$cache" "$www/wheels" "$www/installers"
stamp=$cache/.stamp
want=$(printf '%s\n' "${binaries[@]}" "${sources[@]}" "${target[@]}" | sha256sum | cut -c1-16)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "wheelhouse: downloading into $cache (once per machine)"
  "$python" -m pip download -q --dest "$cache" --find-links "$torch_wheels" \
    --only-binary=:all: "${target[@]}" "${binaries[@]}"
  "$python" -m pip download -q --dest "$cache" --no-deps --no-binary=:all: "${sources[@]}"
  echo "$want" >"$stamp"
else
  echo "wheelhouse: $cache is up to date"
fi

# The CUDA stack: --isolated so this machine's pip configuration (a find-links directory holding
# torch 2.13.0+cpu, a cap file) cannot swap in the CPU build.
cuda_cache=${cache}-cu13
mkdir -p "$cuda_cache" "$www/wheels-cu13"
cuda_stamp=$cuda_cache/.stamp
cuda_want=$(printf '%s\n' "${cuda_stack[@]}" "${tensorflow[@]}" "${system_nccl[@]}" "${binaries[@]}" "${sources[@]}" \
  "${cuda_pythons[@]}" \
  | sha256sum | cut -c1-16)
if [ "$(cat "$cuda_stamp" 2>/dev/null)" != "$cuda_want" ]; then
  echo "wheelhouse: downloading the CUDA 13 stack into $cuda_cache (once per machine, ~3.3 GB)"
  others=()
  for b in "${binaries[@]}"; do [[ $b == torch==* || $b == torchvision==* ]] || others+=("$b"); done
  for py in "${cuda_pythons[@]}"; do
    "$python" -m pip download --isolated -q --dest "$cuda_cache" --only-binary=:all: \
      --python-version "${py:0:1}.${py:1}" --implementation cp --abi "cp$py" --abi abi3 --abi none \
      --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_25_x86_64 \
      --platform manylinux_2_24_x86_64 --platform manylinux_2_18_x86_64 --platform manylinux_2_17_x86_64 \
      --platform manylinux2014_x86_64 --platform manylinux_2_12_x86_64 --platform manylinux2010_x86_64 \
      --platform manylinux_2_5_x86_64 --platform manylinux1_x86_64 --platform any \
      "${cuda_stack[@]}" "${tensorflow[@]}" "${others[@]}"
  done
  "$python" -m pip download --isolated -q --dest "$cuda_cache" --no-deps --no-binary=:all: "${sources[@]}"
  "$python" -m pip download --isolated -q --dest "$cuda_cache" --no-deps --only-binary=:all: \
    --platform manylinux_2_18_x86_64 --python-version 3.11 "${system_nccl[@]}"
  echo "$cuda_want" >"$cuda_stamp"
else
  echo "wheelhouse: $cuda_cache is up to date"
fi

# publish SRC_DIR DEST_DIR: hard links when cache and checkout share a filesystem, copies otherwise.
publish() {
  local f dest
  for f in "$1"/*.whl "$1"/*.tar.gz; do
    dest=$2/$(basename "$f")
    [ -e "$dest" ] || ln "$f" "$dest" 2>/dev/null || cp "$f" "$dest"
  done
  echo "wheelhouse: $(find "$2" -maxdepth 1 -type f | wc -l) files in $2"
}
publish "$cache" "$www/wheels"
publish "$cuda_cache" "$www/wheels-cu13"
# A PEP 503 index over the CPU wheels, standing in for PyTorch's index in the preflight's contact checks.
rm -rf "$www/simple"
python3 "$here/tests/infra/simple_index.py" "$www/wheels" "$www/simple"

# Installer fixtures: the genuine-looking one with its sha256 (as Miniforge publishes <installer>.sha256),
# and a tampered copy (one extra line) that must be refused when checked against the genuine sha256.
fixture=$here/molecule/conda/files/miniforge-installer-fixture.sh
install -m 0644 "$fixture" "$www/installers/Miniforge3-fixture-Linux-x86_64.sh"
( cd "$www/installers" && sha256sum Miniforge3-fixture-Linux-x86_64.sh >Miniforge3-fixture-Linux-x86_64.sh.sha256 )
{ cat "$fixture"; echo 'echo "tampered" >&2'; } >"$www/installers/Miniforge3-fixture-tampered-Linux-x86_64.sh"
# nccl-tests: CI cannot reach GitHub and the project vendors none of NVIDIA's code, so the role is
# exercised with our own TEST FIXTURE source tree of the same build interface
# (tests/standin/nccl-tests), packed reproducibly so its sha256 is stable, with the sha256 beside it.
tar -C "$here/tests/standin" --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner \
  --transform 's|^nccl-tests|nccl-tests-standin|' -cf - nccl-tests | gzip -n >"$www/installers/nccl-tests-standin.tar.gz"
( cd "$www/installers" && sha256sum nccl-tests-standin.tar.gz >nccl-tests-standin.tar.gz.sha256 )
# nvbandwidth the same way (tests/standin/nvbandwidth, our own TEST FIXTURE of its build interface).
tar -C "$here/tests/standin" --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner \
  --transform 's|^nvbandwidth|nvbandwidth-standin|' -cf - nvbandwidth | gzip -n >"$www/installers/nvbandwidth-standin.tar.gz"
( cd "$www/installers" && sha256sum nvbandwidth-standin.tar.gz >nvbandwidth-standin.tar.gz.sha256 )
echo "installers: fixtures in $www/installers"
