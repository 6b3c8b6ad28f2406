#!/usr/bin/env bash
# The full test suite, exactly what CI runs (.ci/run calls this script):
#   1. setup      scripts/bootstrap.sh (.venv with the toolchain, Horovod built by the horovod role)
#   2. lint       yamllint, role READMEs' variables tables (scripts/role_docs.py --check),
#                 ansible-lint (production profile), ruff check + ruff format --check
#   3. infra      dockerd (started only if not running, stopped again if we started it), base images
#                 (debootstrap, cached), collections (scripts/collections.sh, as setup), the local wheelhouse,
#                 the signed stand-in of NVIDIA's apt repo (fresh throwaway key) served on docker0
#   4. pytest     the bench's unit and integration tests (real torchrun/horovodrun, netns hosts, Slurm)
#   5. molecule   every scenario under molecule/: create, converge, idempotence, verify, destroy
#   (1-3 overlap where they can: the images are built while setup compiles Horovod, and the
#   wheelhouse and the pytest-only packages download while lint runs; 4 and 5 share one pool of two
#   jobs: pytest from the start, the scenarios longest first)
# Every step runs even when an earlier one failed (except setup/infra, which the rest need); the
# script prints a summary and exits non-zero if anything failed.
#
# Usage: scripts/test.sh [PART...]   PART: lint | pytest | molecule | molecule:<scenario>
#        (default: all). Logs: .work/logs/<step>.log
set -uo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
export GPURIG_CACHE=${GPURIG_CACHE:-$HOME/.cache/gpurig}
export GPURIG_STATE_DIR=${GPURIG_STATE_DIR:-/tmp/gpurig-test}
export ANSIBLE_COLLECTIONS_PATH=$repo/.cache/collections
export PATH=$repo/.venv/bin:$PATH
export PY_COLORS=0 ANSIBLE_NOCOLOR=1 PYTHONUNBUFFERED=1
logs=$repo/.work/logs
mkdir -p "$logs"
suite_start=$(date +%s)
# cpu_ticks: "busy total" jiffies of all cores so far: /proc/stat's first line, user to steal
# (idle and iowait are not busy; guest time is already in user), proc(5).
cpu_ticks() { awk '/^cpu /{idle=$5+$6; t=0; for(i=2;i<=9;i++) t+=$i; print t-idle, t; exit}' /proc/stat; }
cpu_start=$(cpu_ticks)
declare -a summary=()
failed=0
passed=0

parts=("$@")
[ ${#parts[@]} -gt 0 ] || parts=(lint pytest molecule)
wants() { local p; for p in "${parts[@]}"; do [[ $p == "$1" || $p == "$1":* ]] && return 0; done; return 1; }

# step NAME CMD...: run CMD, tee its output to .work/logs/NAME.log, record pass/fail and seconds.
step() {
  local name=$1 t0 rc
  shift
  t0=$(date +%s)
  printf '\n==== %s ====\n' "$name"
  "$@" 2>&1 | tee "$logs/$name.log"
  rc=${PIPESTATUS[0]}
  local secs=$(( $(date +%s) - t0 ))
  if [ "$rc" = 0 ]; then
    passed=$((passed + 1)); summary+=("PASS  ${secs}s  $name")
  else
    failed=$((failed + 1)); summary+=("FAIL  ${secs}s  $name (rc=$rc, log: .work/logs/$name.log)")
  fi
  return "$rc"
}

print_summary() {
  printf '\n==== summary (%ss) ====\n' "$(( $(date +%s) - suite_start ))"
  printf '%s\n' "${summary[@]}"
  echo "suite: $passed passed, $failed failed"
  # How busy the machine was: near 100% means the suite's length is its work over the cores.
  read -r busy0 total0 <<<"$cpu_start"
  read -r busy1 total1 <<<"$(cpu_ticks)"
  echo "cpu: $(( 100 * (busy1 - busy0) / (total1 - total0 + 1) ))% busy across $(nproc) cores"
}

needs_infra=0
{ wants pytest || wants molecule; } && needs_infra=1

# OS packages the tests use: docker, debootstrap and zstd for the images, the stand-in repo
# builder, the multi-host test hosts and their sshd, the node-exporter that reads verify.yml's
# textfile metrics. Installed first and alone (apt takes one lock)
# so that what follows can run side by side; docker.sh and images.sh install theirs themselves when
# run on their own.
infra_packages=(docker.io debootstrap zstd dpkg-dev apt-utils gnupg openssh-server openssh-client
                iproute2 iptables util-linux prometheus-node-exporter)

packages() {
  local missing=() p
  for p in "${infra_packages[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  [ ${#missing[@]} -eq 0 ] && { echo "packages: all present"; return 0; }
  echo "packages: apt-get install ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# job NAME CMD...: CMD in the background, output to .work/logs/NAME.log only (jobs run side by
# side), its exit status and seconds to .work/logs/NAME.rc.
job() {
  local name=$1 t0 rc
  shift
  t0=$(date +%s)
  "$@" >"$logs/$name.log" 2>&1
  rc=$?
  echo "$rc $(( $(date +%s) - t0 ))" >"$logs/$name.rc"
}

# record NAME LABEL: the finished job's result into the summary (its log's tail when it failed).
record() {
  local rc secs
  read -r rc secs <"$logs/$1.rc" || { rc=1; secs=0; }
  if [ "$rc" = 0 ]; then
    passed=$((passed + 1)); summary+=("PASS  ${secs}s  $2")
  else
    failed=$((failed + 1)); summary+=("FAIL  ${secs}s  $2 (rc=$rc, log: .work/logs/$1.log)")
    printf '\n==== %s failed; last 60 lines of its log ====\n' "$2"
    tail -n 60 "$logs/$1.log"
    if [ "$1" = pytest ]; then  # each failure's own lines, which the tail of a long run leaves out
      printf '\n==== pytest: the failing assertions (E lines) ====\n'
      grep -E '^E ' "$logs/$1.log" | cut -c1-600 | tail -n 60
    fi
  fi
  [ "$rc" = 0 ]
}

# beside NAME CMD...: start CMD as a job beside the foreground steps; joined by `await_job NAME`.
declare -A beside_pids=()
beside() {
  local name=$1
  rm -f "$logs/$name.rc"
  echo "beside: starting $name ($(( $(date +%s) - suite_start ))s into the suite; log: .work/logs/$name.log)"
  job "$@" &
  beside_pids[$name]=$!
}

# await_job NAME: wait for that job, show its log and record it like a step.
await_job() {
  wait "${beside_pids[$1]}"
  unset "beside_pids[$1]"
  printf '\n==== %s ====\n' "$1"
  cat "$logs/$1.log"
  record "$1" "$1"
}

cleanup() {
  local pid
  for pid in "${beside_pids[@]}"; do kill "$pid" 2>/dev/null; done
  tests/infra/serve.sh stop >/dev/null 2>&1
  tests/infra/docker.sh stop
}

images() { tests/infra/docker.sh start && tests/infra/images.sh; }

if [ "$needs_infra" = 1 ]; then
  trap cleanup EXIT
  step packages packages || { print_summary; exit 1; }
  # debootstrap is mostly downloads and unpacking, setup mostly compiling Horovod: side by side.
  beside images images
fi

step setup scripts/bootstrap.sh || { print_summary; exit 1; }

if [ "$needs_infra" = 1 ]; then
  # Downloads (~3.5 GB of wheels, most of them CUDA, on a fresh machine), beside lint. Tried beside setup with the
  # machine's own pip, setup took 393 s against 255 without it (one fresh run each, 2026-11-25).
  beside wheelhouse tests/infra/wheelhouse.sh
fi
if wants pytest; then
  # DALI for the DALI loader's test with CPU operators (1.1 GB with its dependencies) and
  # tensorflow-cpu for the tf launcher's rank tests (274 MB); not part of the bootstrap's quick
  # start. Pinned in constraints.txt, with everything they would change in what setup installed
  # (packaging), so installing them beside lint adds packages and replaces none.
  beside pytest-packages bash -c 'python -m pip install -q -c constraints.txt nvidia-dali-cuda120 &&
    python -m pip install -q -c constraints.txt tensorflow-cpu'
fi

if wants lint; then
  step yamllint yamllint --strict .
  # Each role README's variables table is generated from its argument spec and defaults.
  step role-docs python scripts/role_docs.py --check
  # ansible-lint resolves the modules the roles and scenarios use, so the collections come first
  # (offline: it must never try Galaxy, see .ansible-lint).
  step ansible-lint bash -c 'scripts/collections.sh && ansible-lint'
  step ruff ruff check .
  step ruff-format ruff format --check .
fi

if [ "$needs_infra" = 1 ]; then
  await_job images || { print_summary; exit 1; }
  await_job wheelhouse || { print_summary; exit 1; }
  step infra bash -c 'scripts/collections.sh && python tests/infra/standin_repo.py --manifest tests/standin/packages.yml --work .work --new-key &&
    tests/infra/serve.sh start' || { print_summary; exit 1; }
  STANDIN_URL=$(tests/infra/serve.sh url)
  export STANDIN_URL
  set -a
  # shellcheck disable=SC1091  # written by tests/infra/standin_repo.py
  . .work/standin.env
  set +a
fi

# Scenarios are independent (own containers, names and ephemeral dirs); most of their time is
# apt and Ansible round trips, and one alone keeps ~85% of two cores busy: two jobs on a 2-core
# machine, one fewer than the cores on a bigger one, at most 6 (each scenario's containers and
# Horovod's builds need memory too). GPURIG_MOLECULE_JOBS overrides.
cores=$(nproc)
jobs_max=${GPURIG_MOLECULE_JOBS:-$(( cores <= 3 ? 2 : (cores > 7 ? 6 : cores - 1) ))}
scenarios=()
if wants molecule; then
  for p in "${parts[@]}"; do [[ $p == molecule:* ]] && scenarios+=("${p#molecule:}"); done
  if [ ${#scenarios[@]} -eq 0 ]; then
    # Longest first (horovod builds Horovod in a container; site runs the whole stack on four;
    # upgrade_driver converges four times; libraries runs four roles and their stops), so the pool
    # drains evenly.
    for s in horovod site upgrade_driver container_runtime libraries; do [ -f "molecule/$s/molecule.yml" ] && scenarios+=("$s"); done
    for d in molecule/*/molecule.yml; do
      s=$(basename "$(dirname "$d")")
      [[ " ${scenarios[*]} " == *" $s "* ]] || scenarios+=("$s")
    done
  fi
fi

# start NAME CMD...: start a job once fewer than $jobs_max run.
start() {
  while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do wait -n; done
  echo "pool: starting $1 ($(( $(date +%s) - suite_start ))s into the suite)"
  rm -f "$logs/$1.rc"
  job "$@" &
}

if wants pytest; then
  await_job pytest-packages
fi

# One pool of $jobs_max jobs: pytest holds a place from the start, and the scenarios, longest
# first, take each place as it frees. The suite is CPU-bound (one scenario alone keeps ~85% of the
# two cores busy), so a third job would only slow the others; a place left empty while pytest
# finishes alone would waste what its tests spend waiting (on timeouts, sshd, Slurm).
if wants molecule; then
  printf '\n==== pool: pytest and %s molecule scenarios, %s at a time ====\n' "${#scenarios[@]}" "$jobs_max"
fi
if wants pytest; then
  # pytest exits 5 when it collected nothing: that is a failure of the suite, not a pass.
  # GPURIG_REQUIRE_ALL_TESTS=1: a missing prerequisite (Horovod, root for netns, sshd) fails
  # the test instead of skipping it, so the suite cannot go green by skipping.
  start pytest env GPURIG_REQUIRE_ALL_TESTS=1 \
    python -m pytest -q -rfE --durations=30 tests/unit tests/integration
fi
for s in "${scenarios[@]}"; do
  start "molecule-$s" molecule test -s "$s"
done
wait

if wants pytest; then
  printf '\n==== pytest (its summary; whole log: .work/logs/pytest.log) ====\n'
  sed -n '/slowest .* durations/,$p' "$logs/pytest.log" | tail -n 80
  record pytest pytest
fi
for s in "${scenarios[@]}"; do
  record "molecule-$s" "molecule $s"
done

print_summary
[ "$failed" = 0 ]
