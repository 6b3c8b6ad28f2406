#!/usr/bin/env bash
# Fill what the python_env/horovod/conda molecule scenarios install from, so the containers need no
# PyPI and no GitHub and every run installs the same files:
#   .work/www/wheels/      a pip find-links directory (cp311, manylinux x86_64): CPU torch and
#                          everything the python_env and horovod roles install, plus Horovod's sdist
#   .work/www/installers/  TEST FIXTURE installers with their .sha256 files (see molecule/conda/files)
# Downloads go to $GPUSTACK_CACHE/wheelhouse (default ~/.cache/gpustack) once per machine and are
# hard-linked (or copied) into .work/www. A stamp of the pins below skips pip entirely on a re-run.
# Environment: GPUSTACK_CACHE, PYTHON (a pip to download with; default .venv/bin/python),
#              GPUSTACK_TORCH_WHEEL_DIR (where the CPU torch wheel lies; default /opt/wheels).
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
cache=${GPUSTACK_CACHE:-$HOME/.cache/gpustack}/wheelhouse
www=$here/.work/www
python=${PYTHON:-$here/.venv/bin/python}
torch_wheels=${GPUSTACK_TORCH_WHEEL_DIR:-/opt/wheels}

# The containers' interpreter is Debian 12's CPython 3.11 (also in the Ubuntu 20.04 stand-in).
target=(--python-version 3.11 --implementation cp --abi cp311 --abi abi3 --abi none
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64
        --platform manylinux2014_x86_64 --platform any)
# Exact versions (the ones this repository's .venv is tested with); dependencies resolve once, then stay cached.
binaries=(
  torch==2.13.0+cpu torchvision==0.28.0
  numpy==2.4.6 pandas==3.1.1 pyarrow==26.0.1 matplotlib==3.11.2 nvidia-ml-py==13.615.71 tqdm==4.70.1
  setuptools==84.2.1 wheel==0.48.0 packaging==26.3
  cloudpickle==3.1.2 psutil==7.2.2 pyyaml==6.0.3 cffi==2.1.1
)
sources=(horovod==0.28.1)

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

# Publish: hard links when cache and checkout share a filesystem, copies otherwise.
for f in "$cache"/*.whl "$cache"/*.tar.gz; do
  dest=$www/wheels/$(basename "$f")
  [ -e "$dest" ] || ln "$f" "$dest" 2>/dev/null || cp "$f" "$dest"
done
echo "wheelhouse: $(find "$www/wheels" -maxdepth 1 -type f | wc -l) files in $www/wheels"

# Installer fixtures: the genuine-looking one with its sha256 (as Miniforge publishes <installer>.sha256),
# and a tampered copy (one extra line) that must be refused when checked against the genuine sha256.
fixture=$here/molecule/conda/files/miniforge-installer-fixture.sh
install -m 0644 "$fixture" "$www/installers/Miniforge3-fixture-Linux-x86_64.sh"
( cd "$www/installers" && sha256sum Miniforge3-fixture-Linux-x86_64.sh >Miniforge3-fixture-Linux-x86_64.sh.sha256 )
{ cat "$fixture"; echo 'echo "tampered" >&2'; } >"$www/installers/Miniforge3-fixture-tampered-Linux-x86_64.sh"
echo "installers: fixtures in $www/installers"
