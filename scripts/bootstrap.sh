#!/usr/bin/env bash
# Set up everything this repository needs on a fresh Debian/Ubuntu machine:
#   - OS packages to build Horovod (compiler, cmake, Python headers, venv)
#   - .venv with the bench, PyTorch (pinned by constraints.txt) and the provisioning/test toolchain
#   - Horovod built into .venv by the project's own horovod role (playbooks/dev-env.yml), the same
#     recipe servers get; NCCL when this machine has NVIDIA GPUs, Gloo otherwise.
# Re-running is cheap: each step is skipped when its inputs have not changed.
# Environment: PYTHON (interpreter for the venv, >= 3.10), GPUSTACK_SKIP_HOROVOD=1 to skip Horovod.
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
venv=.venv

log() { printf '\033[1mbootstrap:\033[0m %s\n' "$*"; }

apt_install() {
  local missing=()
  for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    log "please install: ${missing[*]}"; return 1
  fi
  log "apt-get install ${missing[*]}"
  [ -n "$(find /var/lib/apt/lists -maxdepth 1 -name '*Packages*' -print -quit 2>/dev/null)" ] \
    || apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# 1. OS packages. python3-venv/-dev only matter when the venv's python is the system one.
apt_install build-essential cmake git ca-certificates
if [ "$("$python" -c 'import sys; print(sys.prefix)')" = /usr ]; then
  apt_install python3-venv python3-dev
fi
"$python" - <<'PY' || { log "PyTorch 2.13 needs Python >= 3.10; set PYTHON=/path/to/python3.10+"; exit 1; }
import sys
sys.exit(0 if sys.version_info >= (3, 10) else 1)
PY

# 2. The virtual environment, reinstalled only when pyproject.toml or constraints.txt change.
stamp=$venv/.gpustack-deps
want=$(cat pyproject.toml constraints.txt | sha256sum | cut -c1-16)
if [ ! -x $venv/bin/python ]; then
  log "creating $venv"
  "$python" -m venv $venv
fi
if [ "$(cat $stamp 2>/dev/null)" != "$want" ]; then
  log "installing the bench, PyTorch and the test toolchain into $venv"
  $venv/bin/python -m pip install -q --upgrade pip
  $venv/bin/python -m pip install -q -c constraints.txt -e '.[torch,test]'
  echo "$want" >$stamp
fi

# 3. Horovod, built by the horovod role into this venv (skipped when already built for this torch).
if [ "${GPUSTACK_SKIP_HOROVOD:-0}" != 1 ]; then
  log "ensuring Horovod is built into $venv (playbooks/dev-env.yml)"
  ANSIBLE_CONFIG=ansible.cfg $venv/bin/ansible-playbook -i inventory/local/hosts.yml \
    playbooks/dev-env.yml -e "gpustack_repo_dir=$PWD"
fi
log "ready: $venv/bin/python -m bench.scaling --help"
