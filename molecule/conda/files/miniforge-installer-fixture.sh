#!/bin/bash
# TEST FIXTURE standing in for a Miniforge installer (Miniforge3-<version>-Linux-x86_64.sh).
# It is NOT Miniforge and installs no working conda. It implements only the installer's batch-mode
# command line (-b, -u, -p PREFIX) and its refusal to install over an existing prefix without -u, so
# the conda role's download, checksum, run-once and configuration logic can be tested where the
# real installer cannot be fetched. Every run appends a line to PREFIX/.fixture-installer-runs so a
# test can count how often the role ran it.
# With GPURIG_TEST_FIXTURE_PYTHON set to a real python3.X binary (tests/integration/
# test_bootstrap_python.py, for scripts/bootstrap.sh), it also lays out the piece of the base
# environment bootstrap uses: PREFIX/bin/python3 -> python3.X, that interpreter linked in (not
# conda-forge's build).
set -eu
batch=0
update=0
prefix="${HOME}/miniforge3"
while getopts "bfhp:stu" opt; do
  case "$opt" in
    b) batch=1 ;;
    u) update=1 ;;
    p) prefix=$OPTARG ;;
    h) echo "usage: $0 [-b] [-u] [-p PREFIX]  (TEST FIXTURE)"; exit 0 ;;
    *) ;;
  esac
done
if [ "$batch" != 1 ]; then
  echo "TEST FIXTURE: only batch mode (-b) is implemented" >&2
  exit 2
fi
if [ -e "$prefix" ] && [ "$update" != 1 ]; then
  echo "ERROR: File or directory already exists: '$prefix'" >&2
  echo "If you want to update an existing installation, use the -u option." >&2
  exit 1
fi
mkdir -p "$prefix/bin" "$prefix/condabin" "$prefix/etc/profile.d" "$prefix/conda-meta"
cat >"$prefix/bin/conda" <<'CONDA'
#!/bin/sh
echo "TEST FIXTURE: this is not conda" >&2
exit 1
CONDA
chmod 0755 "$prefix/bin/conda"
cp "$prefix/bin/conda" "$prefix/condabin/conda"
echo "# TEST FIXTURE: stands in for conda's shell function script" >"$prefix/etc/profile.d/conda.sh"
if [ -n "${GPURIG_TEST_FIXTURE_PYTHON:-}" ]; then
  version=$("$GPURIG_TEST_FIXTURE_PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  ln -sfn "$GPURIG_TEST_FIXTURE_PYTHON" "$prefix/bin/python$version"
  ln -sfn "python$version" "$prefix/bin/python3"
  ln -sfn "python$version" "$prefix/bin/python"
fi
echo "run: $*" >>"$prefix/.fixture-installer-runs"
