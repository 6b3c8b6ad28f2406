#!/usr/bin/env bash
# Set up everything this repository needs on a fresh Debian/Ubuntu machine:
#   - OS packages to build Horovod (compiler, cmake, git)
#   - a Python new enough for the project (pyproject.toml's requires-python): python3 when it is,
#     otherwise Miniforge installed into .cache/miniforge, the way the conda role installs it on
#     servers (same release, URL and sha256, checked before the installer runs)
#   - .venv from that Python with the bench, PyTorch (pinned by constraints.txt) and the
#     provisioning/test toolchain
#   - the Ansible collections of requirements.yml in .cache/collections (scripts/collections.sh)
#   - Horovod built into .venv by the project's own horovod role (playbooks/dev-env.yml), the same
#     recipe servers get; NCCL when this machine has NVIDIA GPUs, Gloo otherwise.
# Re-running is cheap: each step is skipped when its inputs have not changed.
#
# Environment:
#   PYTHON                        interpreter for the venv (default python3); one older than
#                                 requires-python (Ubuntu 20.04's 3.8, 22.04's 3.10) is not used:
#                                 Miniforge is installed instead
#   GPURIG_MINIFORGE_PREFIX     where that Miniforge goes (default <repo>/.cache/miniforge)
#   GPURIG_MINIFORGE_URL        installer to fetch instead of the conda role's default: https://,
#                                 or file:///path for a copy on this machine (tests use a fixture)
#   GPURIG_MINIFORGE_SHA256     the sha256 that installer must have (default: the conda role's
#                                 for this CPU architecture); a mismatch refuses it unrun
#   GPURIG_SKIP_HOROVOD=1       skip Horovod
#   GPURIG_BOOTSTRAP_STOP_AFTER=venv   stop once .venv exists (tests)
set -euo pipefail
cd "$(dirname "$0")/.."
venv=.venv
conda_defaults=roles/conda/defaults/main.yml
miniforge_prefix=${GPURIG_MINIFORGE_PREFIX:-$PWD/.cache/miniforge}
staging=

log() { printf '\033[1mbootstrap:\033[0m %s\n' "$*"; }
die() { log "$*" >&2; exit 1; }
trap '[ -z "$staging" ] || rm -rf "$staging"' EXIT

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

# The Python floor, "MAJOR MINOR", from pyproject.toml's requires-python (">=3.11"): the one place
# it is written.
python_floor() {
  local floor
  floor=$(sed -nE 's/^requires-python *= *">= *([0-9]+)\.([0-9]+)".*/\1 \2/p' pyproject.toml)
  [ -n "$floor" ] || die "pyproject.toml: expected requires-python = \">=X.Y\""
  echo "$floor"
}
floor=$(python_floor)
read -r py_major py_minor <<<"$floor"

# python_ok PY: PY runs and is at least the floor (any Python can answer this, even 2.7).
python_ok() {
  "$1" -c "import sys; sys.exit(0 if sys.version_info >= ($py_major, $py_minor) else 1)" >/dev/null 2>&1
}
python_version() { "$1" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])' 2>/dev/null || echo "not found"; }

# miniforge_release ARCH: "VERSION URL SHA256" of the Miniforge installer the conda role installs,
# read from its defaults (conda_version, conda_installer_url, conda_installer_sha256_by_arch) so a
# release bump there moves this script too. Read with awk, not YAML: this runs before any venv, on
# machines whose only Python may be 3.8 without PyYAML. (Running the conda role itself is not an
# option here: ansible-core 2.19 needs Python >= 3.11 on the controller, the very thing missing.)
# If the release moves to another file, this function is the only thing to change.
miniforge_release() {
  local arch=$1 fields version url sha
  [ -f "$conda_defaults" ] || die "$conda_defaults is missing"
  fields=$(awk -v arch="$arch" '
    function unquote(s) { gsub(/^["\047]|["\047]$/, "", s); return s }
    /^[A-Za-z_]/ {                                   # a top-level key: "key: value" or "key: >-"
      key = $0; sub(/:.*/, "", key)
      value = $0; sub(/^[^:]*:[ \t]*/, "", value)
      if (key == "conda_version") version = unquote(value)
      if (key == "conda_installer_url") url = (value ~ /^>/ ? "" : unquote(value))
      next
    }
    /^[ \t]+[^ \t#]/ && key == "conda_installer_url" {     # a folded scalar: lines join with spaces
      line = $0; sub(/^[ \t]+/, "", line); url = (url == "" ? line : url " " line)
    }
    /^[ \t]+[^ \t#]/ && key == "conda_installer_sha256_by_arch" && $1 == arch ":" { sha = unquote($2) }
    END { print version; print url; print sha }
  ' "$conda_defaults")
  { read -r version; read -r url; read -r sha; } <<<"$fields"
  # The URL is a Jinja template over these two values; render them and refuse anything else.
  url=$(sed -E -e "s/\{\{ *conda_version *\}\}/$version/g" \
    -e "s/\{\{ *ansible_facts\[['\"]architecture['\"]\] *\}\}/$arch/g" <<<"$url")
  if [ -z "$version" ] || [ -z "$url" ] || [[ $url == *'{{'* ]]; then
    die "could not read conda_version and conda_installer_url from $conda_defaults (got '$version', '$url')"
  fi
  echo "$version $url $sha"
}

# fetch URL FILE: https only (redirects included), or a file:// path on this machine.
fetch() {
  case $1 in
    https://*)
      command -v curl >/dev/null || command -v wget >/dev/null || apt_install curl
      if command -v curl >/dev/null; then
        curl -fsSL --proto '=https' --proto-redir '=https' --retry 3 -o "$2" "$1"
      else
        wget -q --https-only -O "$2" "$1"
      fi
      ;;
    file://*) cp -- "${1#file://}" "$2" ;;
    *) die "refusing to fetch $1: the Miniforge installer comes over https:// (or file:// from this machine)" ;;
  esac
}

# install_miniforge: Miniforge into $miniforge_prefix, once per installer (its sha256 recorded as
# the conda role records it), checked against the sha256 before it runs, in batch mode (-b; -u over
# an existing prefix), the installer interface of Miniforge's README and `installer.sh -h`.
install_miniforge() {
  local arch release version url sha sha_source record installer
  arch=$(uname -m)
  release=$(miniforge_release "$arch")
  read -r version url sha <<<"$release"
  url=${GPURIG_MINIFORGE_URL:-$url}
  sha=$(tr 'A-F' 'a-f' <<<"${GPURIG_MINIFORGE_SHA256:-$sha}")
  sha_source=${GPURIG_MINIFORGE_SHA256:+GPURIG_MINIFORGE_SHA256}
  [ -n "$sha" ] || die "$conda_defaults has no conda_installer_sha256_by_arch entry for $arch: set" \
    "GPURIG_MINIFORGE_URL and GPURIG_MINIFORGE_SHA256, or PYTHON=/path/to/python$py_major.$py_minor+"
  [[ $sha =~ ^[0-9a-f]{64}$ ]] || die "the Miniforge installer's sha256 must be 64 hex digits, got '$sha'"
  record="{\"version\": \"$version\", \"installer_sha256\": \"$sha\"}"
  if [ -x "$miniforge_prefix/bin/python3" ] &&
    [ "$(cat "$miniforge_prefix/.gpurig-miniforge.json" 2>/dev/null)" = "$record" ]; then
    return 0
  fi
  log "installing Miniforge $version into $miniforge_prefix (from $url, sha256 $sha)"
  staging=$(mktemp -d "${TMPDIR:-/tmp}/gpurig-miniforge.XXXXXX")
  installer=$staging/Miniforge3-$version-Linux-$arch.sh
  fetch "$url" "$installer" || die "could not download $url"
  if ! sha256sum -c --quiet --status - <<<"$sha  $installer"; then
    die "refusing the Miniforge installer from $url: its sha256 is" \
      "$(sha256sum "$installer" | cut -d' ' -f1), expected $sha (${sha_source:-$conda_defaults}); it was not run"
  fi
  mkdir -p "$(dirname "$miniforge_prefix")"
  if [ -e "$miniforge_prefix" ]; then
    bash "$installer" -b -u -p "$miniforge_prefix"
  else
    bash "$installer" -b -p "$miniforge_prefix"
  fi
  [ -x "$miniforge_prefix/bin/python3" ] || die "the installer left no $miniforge_prefix/bin/python3"
  echo "$record" >"$miniforge_prefix/.gpurig-miniforge.json"
  rm -rf "$staging"; staging=
}

# use_miniforge_python: set python to a Python >= the floor from Miniforge: its base Python when
# that is new enough (Miniforge does not document which one it ships: conda-forge/miniforge#768),
# otherwise one conda creates beside it.
use_miniforge_python() {
  local env=$miniforge_prefix/envs/python$py_major.$py_minor
  install_miniforge
  python=$miniforge_prefix/bin/python3
  python_ok "$python" && return 0
  if ! python_ok "$env/bin/python3"; then
    log "Miniforge's base Python is $(python_version "$python"): creating $env (conda-forge)"
    "$miniforge_prefix/bin/conda" create -y -q -p "$env" "python=$py_major.$py_minor" ||
      die "conda could not create $env"
  fi
  python=$env/bin/python3
}

# 1. OS packages.
apt_install build-essential cmake git ca-certificates

# 2. The Python the venv is built from.
python=${PYTHON:-python3}
if ! python_ok "$python"; then
  log "$python: Python $(python_version "$python"); this project needs Python >= $py_major.$py_minor" \
    "(pyproject.toml), so it uses Miniforge's"
  use_miniforge_python
fi
log "using $python (Python $(python_version "$python"))"
# python3-venv/-dev only matter when the venv's python is the system one.
if [ "$("$python" -c 'import sys; print(sys.prefix)')" = /usr ]; then
  apt_install python3-venv python3-dev
fi

# venv_stale: why .venv must be made again (printed), or fail when it is fine: no working Python,
# one older than the floor (a venv from an older bootstrap), or another minor version than its
# packages were installed for (its base Python was replaced, e.g. by a newer Miniforge).
venv_stale() {
  local built now
  [ -x $venv/bin/python ] || { echo "it has no working Python"; return 0; }
  now=$(python_version $venv/bin/python | cut -d. -f1,2)
  python_ok $venv/bin/python || { echo "it holds Python $now"; return 0; }
  built=$(sed -nE 's/^version(_info)? *= *([0-9]+\.[0-9]+).*/\2/p' $venv/pyvenv.cfg 2>/dev/null)
  [ "$built" = "$now" ] || { echo "it was built for Python ${built:-?} and now runs $now"; return 0; }
  return 1
}

# 3. The virtual environment (made again when stale, see above), its packages reinstalled only
#    when pyproject.toml or constraints.txt change.
stamp=$venv/.gpurig-deps
want=$(cat pyproject.toml constraints.txt | sha256sum | cut -c1-16)
if [ ! -e $venv ]; then
  log "creating $venv"
  "$python" -m venv $venv
elif reason=$(venv_stale); then
  log "recreating $venv: $reason"
  "$python" -m venv --clear $venv
fi
if [ "${GPURIG_BOOTSTRAP_STOP_AFTER:-}" = venv ]; then
  log "stopping after the venv (GPURIG_BOOTSTRAP_STOP_AFTER=venv): $venv has Python $(python_version $venv/bin/python)"
  exit 0
fi
if [ "$(cat $stamp 2>/dev/null)" != "$want" ]; then
  log "installing the bench, PyTorch and the test toolchain into $venv"
  $venv/bin/python -m pip install -q --upgrade pip
  $venv/bin/python -m pip install -q -c constraints.txt -e '.[torch,test]'
  echo "$want" >$stamp
fi

# 4. The Ansible collections the roles use (requirements.yml), where ansible.cfg looks for them, so
#    the README's ansible-playbook commands work from here on.
log "ensuring the Ansible collections are in .cache/collections (scripts/collections.sh)"
PYTHON=$venv/bin/python scripts/collections.sh

# 5. Horovod, built by the horovod role into this venv (skipped when already built for this torch).
if [ "${GPURIG_SKIP_HOROVOD:-0}" != 1 ]; then
  log "ensuring Horovod is built into $venv (playbooks/dev-env.yml)"
  ANSIBLE_CONFIG=ansible.cfg $venv/bin/ansible-playbook -i inventory/local/hosts.yml \
    playbooks/dev-env.yml -e "gpurig_repo_dir=$PWD"
fi
log "ready: $venv/bin/python -m bench.scaling --help"
