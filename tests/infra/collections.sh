#!/usr/bin/env bash
# Put the collections molecule's docker driver and the roles need into .cache/collections,
# taken from the `ansible` package on PyPI (Galaxy is not reachable everywhere). The wheel is
# cached in $GPUSTACK_CACHE; ansible 12.x is the release line that ships with ansible-core 2.19.
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
cache=${GPUSTACK_CACHE:-$HOME/.cache/gpustack}
dest=$here/.cache/collections
ansible_version=${GPUSTACK_ANSIBLE_VERSION:-12.2.0}
wanted=(community/docker ansible/posix community/general)
python=${PYTHON:-$here/.venv/bin/python}

have_all=1
for c in "${wanted[@]}"; do [ -f "$dest/ansible_collections/$c/MANIFEST.json" ] || have_all=0; done
if [ "$have_all" = 1 ]; then echo "collections: present in $dest"; exit 0; fi

mkdir -p "$cache/wheels-ansible" "$dest"
wheel=$(ls "$cache"/wheels-ansible/ansible-"$ansible_version"-*.whl 2>/dev/null | head -n1 || true)
if [ -z "$wheel" ]; then
  echo "collections: downloading ansible==$ansible_version from PyPI (once per machine)"
  "$python" -m pip download -q --no-deps --only-binary=:all: -d "$cache/wheels-ansible" "ansible==$ansible_version"
  wheel=$(ls "$cache"/wheels-ansible/ansible-"$ansible_version"-*.whl | head -n1)
fi
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
