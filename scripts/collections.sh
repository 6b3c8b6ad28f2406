#!/usr/bin/env bash
# Put the Ansible collections of requirements.yml (the roles' filters, molecule's docker driver)
# into .cache/collections, the path ansible.cfg reads: from Galaxy where it answers, otherwise
# from the `ansible` package on PyPI (Galaxy is not reachable everywhere), checksum-verified.
# requirements.yml pins the versions that ansible 12.2.0's wheel carries, so both sources give the
# same collections. scripts/bootstrap.sh and scripts/test.sh both run it. The wheel is cached in
# $GPURIG_CACHE; ansible 12.x is the release line that ships with ansible-core 2.19.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cache=${GPURIG_CACHE:-$HOME/.cache/gpurig}
dest=$here/.cache/collections
ansible_version=12.2.0
# sha256 of ansible-12.2.0-py3-none-any.whl as PyPI's index lists it; pip checks it on download
# and this script checks it again on the cached copy.
ansible_sha256=daafa5c528317f60f68033ad70c59733f4a7548b6255759183cfc7cf422c7fda
wanted=(community/docker ansible/posix community/general)
python=${PYTHON:-$here/.venv/bin/python}
case $python in */*) python=$(cd "$(dirname "$python")" && pwd)/$(basename "$python") ;; esac

have_all() {
  for c in "${wanted[@]}"; do [ -f "$dest/ansible_collections/$c/MANIFEST.json" ] || return 1; done
}
if have_all; then echo "collections: present in $dest"; exit 0; fi

mkdir -p "$dest"
galaxy=$(dirname "$python")/ansible-galaxy
said=$(mktemp)
if [ -x "$galaxy" ] &&
  timeout 300 "$galaxy" collection install -r "$here/requirements.yml" -p "$dest" >"$said" 2>&1 &&
  have_all; then
  rm -f "$said"; echo "collections: installed from Galaxy into $dest"; exit 0
fi
echo "collections: Galaxy did not answer ($(grep -v '^[[:space:]]*$' "$said" 2>/dev/null | tail -n1 || true)); taking them from PyPI's ansible $ansible_version"
rm -f "$said"

mkdir -p "$cache/wheels-ansible" "$dest"
wheel=$(ls "$cache"/wheels-ansible/ansible-"$ansible_version"-*.whl 2>/dev/null | head -n1 || true)
if [ -z "$wheel" ]; then
  echo "collections: downloading ansible==$ansible_version from PyPI (once per machine)"
  req=$(mktemp)
  echo "ansible==$ansible_version --hash=sha256:$ansible_sha256" >"$req"
  "$python" -m pip download -q --no-deps --only-binary=:all: --require-hashes -r "$req" -d "$cache/wheels-ansible"
  rm -f "$req"
  wheel=$(ls "$cache"/wheels-ansible/ansible-"$ansible_version"-*.whl | head -n1)
fi
echo "$ansible_sha256  $wheel" | sha256sum --check --quiet - ||
  { echo "collections: $wheel does not match its pinned sha256; delete it and re-run" >&2; exit 1; }
patterns=()
for c in "${wanted[@]}"; do patterns+=("ansible_collections/$c/*"); done
( cd "$dest" && "$python" - "$wheel" "${patterns[@]}" <<'PY'
import fnmatch, sys, zipfile
wheel, patterns = sys.argv[1], sys.argv[2:]
with zipfile.ZipFile(wheel) as zf:
    members = [m for m in zf.namelist() if any(fnmatch.fnmatch(m, p) for p in patterns)]
    zf.extractall(".", members)
print(f"collections: extracted {len(members)} files")
PY
)
for c in "${wanted[@]}"; do
  [ -f "$dest/ansible_collections/$c/MANIFEST.json" ] || { echo "collections: $c missing from ansible $ansible_version" >&2; exit 1; }
done
