#!/bin/bash
# TEST FIXTURE standing in for a Miniforge installer (Miniforge3-<version>-Linux-<arch>.sh) in
# tests/integration/test_bootstrap_python.py. It is NOT Miniforge and installs no conda. It copies
# only what scripts/bootstrap.sh relies on:
#   - the command line of Miniforge's (constructor-built) installers in batch mode, as their `-h`
#     lists it: -b batch mode (no prompts), -p PREFIX install prefix, -u update an existing prefix
#     (without -u an existing prefix is refused, as the real installer refuses it);
#   - the layout piece bootstrap uses: PREFIX/bin/python3 -> python3.X, the base environment's
#     interpreter. Here that interpreter is a real CPython >= 3.11 already present on the test
#     machine (GPUSTACK_TEST_FIXTURE_PYTHON), linked in, not conda-forge's build.
# Every run appends a line to PREFIX/.fixture-installer-runs so the test can count the runs.
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
python=${GPUSTACK_TEST_FIXTURE_PYTHON:?TEST FIXTURE: set GPUSTACK_TEST_FIXTURE_PYTHON to a python3.X binary}
version=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
mkdir -p "$prefix/bin" "$prefix/conda-meta"
ln -sfn "$python" "$prefix/bin/python$version"
ln -sfn "python$version" "$prefix/bin/python3"
ln -sfn "python$version" "$prefix/bin/python"
echo "TEST FIXTURE: stands in for Miniforge's base environment" >"$prefix/conda-meta/gpustack-fixture"
echo "run: $*" >>"$prefix/.fixture-installer-runs"
