#!/usr/bin/env bash
# A real, throwaway Slurm cluster for the bench's Slurm tests: Debian's slurm-wlm and munge with
# a minimal configuration, every daemon started by this script and stopped again.
#
#   tests/infra/slurm.sh up           one node: this machine (NodeName = its short hostname)
#   tests/infra/slurm.sh up netns     the network-namespace test hosts as nodes (run
#                                     tests/infra/netns.sh up first); slurmctld listens on the
#                                     bridge address, one slurmd runs inside each host
#   tests/infra/slurm.sh down         stop the daemons and remove the state directory
#   tests/infra/slurm.sh status       sinfo; exit 1 unless every node is idle
#
# Nothing touches /etc/slurm or the system's munge: the daemons use their own munge key and
# socket and a slurm.conf in the state directory. Clients find it through SLURM_CONF:
#   . "$GSB_SLURM_STATE/env"   (exports SLURM_CONF)
#
# Settings (environment): GSB_SLURM_STATE (default /tmp/gpurig-slurm), GSB_SLURM_PORT (first
# of two ports, default 6917), GSB_SLURM_MUNGE_DIR (munge socket, default
# /run/gpurig-slurm-<port>), GSB_NETNS_STATE and GSB_NETNS_PREFIX (as for netns.sh: whose hosts
# and bridge), GSB_SLURM_WAIT_S (how long to wait for nodes to become idle, default 60),
# GSB_SLURM_CONF_EXTRA (lines added to slurm.conf, e.g. HealthCheckProgram=... for the health
# check's test).
set -euo pipefail

STATE="${GSB_SLURM_STATE:-/tmp/gpurig-slurm}"
PORT="${GSB_SLURM_PORT:-6917}"
NETNS_STATE="${GSB_NETNS_STATE:-/tmp/gpurig-netns}"
BRIDGE="${GSB_NETNS_PREFIX:-gsb}br0"
WAIT_S="${GSB_SLURM_WAIT_S:-60}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CONF="$STATE/slurm.conf"
# munged wants every directory above its socket traversable by all, which a private temporary
# directory (pytest's are 0700) is not: the socket lives in /run, named after the port.
MUNGE_DIR="${GSB_SLURM_MUNGE_DIR:-/run/gpurig-slurm-$PORT}"
MUNGE_SOCKET="$MUNGE_DIR/munge.socket"

log() { printf 'slurm.sh: %s\n' "$*" >&2; }
die() {
  log "error: $*"
  exit 1
}

ensure_packages() {
  local missing=()
  command -v slurmctld >/dev/null 2>&1 || missing+=(slurmctld)
  command -v slurmd >/dev/null 2>&1 || missing+=(slurmd)
  command -v sbatch >/dev/null 2>&1 || missing+=(slurm-client)
  command -v munged >/dev/null 2>&1 || missing+=(munge)
  if ((${#missing[@]})); then
    log "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
}

pid_alive() { [[ -s "$1" ]] && kill -0 "$(cat "$1")" 2>/dev/null; }

start_munge() {
  mkdir -p "$STATE/munge" "$STATE/run" "$MUNGE_DIR"
  chmod 700 "$STATE/munge"
  chmod 755 "$MUNGE_DIR"
  if [[ ! -s "$STATE/munge/munge.key" ]]; then
    dd if=/dev/urandom of="$STATE/munge/munge.key" bs=1024 count=1 status=none
    chmod 600 "$STATE/munge/munge.key"
  fi
  if ! pid_alive "$STATE/run/munged.pid"; then
    munged --socket="$MUNGE_SOCKET" --key-file="$STATE/munge/munge.key" \
      --pid-file="$STATE/run/munged.pid" --log-file="$STATE/munge/munged.log" \
      --seed-file="$STATE/munge/munged.seed" ||
      die "munged did not start: $(tail -n 3 "$STATE/munge/munged.log" 2>/dev/null)"
  fi
  munge -S "$MUNGE_SOCKET" -n | unmunge -S "$MUNGE_SOCKET" >/dev/null ||
    die "munge round trip failed"
}

# "NodeName=... CPUs=... Boards=... SocketsPerBoard=... CoresPerSocket=... ThreadsPerCore=..."
# as slurmd -C measures this machine, with the memory given explicitly (a node configured with
# more than it has is drained; less is fine).
hardware() { slurmd -C | head -n 1 | sed -e 's/^NodeName=[^ ]* //' -e 's/ RealMemory=[0-9]*//'; }

write_conf() {
  local mode="$1" ctld_addr nodes=() names=() name addr hw
  hw="$(hardware)"
  if [[ "$mode" == netns ]]; then
    [[ -s "$NETNS_STATE/nodes.json" ]] || die "no netns hosts ($NETNS_STATE/nodes.json); run tests/infra/netns.sh up"
    # The bridge of these hosts (netns.sh's name for it), not another prefix's hosts' bridge
    ctld_addr="$(ip -4 -o addr show dev "$BRIDGE" 2>/dev/null | awk '{split($4, a, "/"); print a[1]; exit}')"
    [[ -n "$ctld_addr" ]] || die "no address on bridge $BRIDGE for slurmctld (is tests/infra/netns.sh up?)"
    while read -r name addr; do
      nodes+=("NodeName=$name NodeAddr=$addr $hw RealMemory=1024 State=UNKNOWN")
      names+=("$name")
    done < <(python3 -c 'import json,sys; [print(n["name"], n["address"]) for n in json.load(open(sys.argv[1]))]' "$NETNS_STATE/nodes.json")
  else
    ctld_addr=127.0.0.1
    name="$(hostname -s)"
    nodes+=("NodeName=$name NodeAddr=127.0.0.1 $hw RealMemory=1024 State=UNKNOWN")
    names+=("$name")
  fi
  mkdir -p "$STATE/ctld" "$STATE/log"
  local IFS=,
  cat >"$CONF" <<EOF
# Test cluster written by tests/infra/slurm.sh ($mode)
ClusterName=gsbtest
SlurmctldHost=$(hostname -s)($ctld_addr)
SlurmctldPort=$PORT
SlurmdPort=$((PORT + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$MUNGE_SOCKET
CredType=cred/munge
# No cgroup plugins: the test machine may lack a writable cgroup hierarchy.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SwitchType=switch/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MinJobAge=600
KillWait=10
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/spool-%n
SlurmctldPidFile=$STATE/run/slurmctld.pid
SlurmdPidFile=$STATE/run/slurmd-%n.pid
SlurmctldLogFile=$STATE/log/slurmctld.log
SlurmdLogFile=$STATE/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
${GSB_SLURM_CONF_EXTRA:-}
$(printf '%s\n' "${nodes[@]}")
PartitionName=test Nodes=${names[*]} Default=YES MaxTime=60 State=UP
EOF
  printf 'export SLURM_CONF=%q\n' "$CONF" >"$STATE/env"
  printf '%s\n' "${names[@]}" >"$STATE/nodes"
}

start_daemons() {
  local mode="$1" name
  export SLURM_CONF="$CONF"
  if ! pid_alive "$STATE/run/slurmctld.pid"; then
    slurmctld -f "$CONF" -i || die "slurmctld did not start: $(tail -n 5 "$STATE/log/slurmctld.log" 2>/dev/null)"
  fi
  while read -r name; do
    pid_alive "$STATE/run/slurmd-$name.pid" && continue
    mkdir -p "$STATE/spool-$name"
    if [[ "$mode" == netns ]]; then
      "$HERE/netns.sh" exec "$name" -- slurmd -f "$CONF" -N "$name" ||
        die "slurmd on $name did not start: $(tail -n 5 "$STATE/log/slurmd-$name.log" 2>/dev/null)"
    else
      slurmd -f "$CONF" -N "$name" ||
        die "slurmd did not start: $(tail -n 5 "$STATE/log/slurmd-$name.log" 2>/dev/null)"
    fi
  done <"$STATE/nodes"
}

wait_idle() {
  local tries states
  for tries in $(seq 1 $((WAIT_S * 2))); do
    states="$(sinfo -h -N -o '%N %T' 2>/dev/null || true)"
    if [[ -n "$states" ]] && ! grep -qv ' idle$' <<<"$states"; then
      return 0
    fi
    sleep 0.5
  done
  log "nodes not idle after ${WAIT_S}s (tries: $tries):"
  printf '%s\n' "$states" >&2
  tail -n 5 "$STATE"/log/*.log >&2 || true
  return 1
}

cmd_up() {
  local mode="${1:-local}"
  [[ "$mode" == local || "$mode" == netns ]] || die "mode must be local or netns, got '$mode'"
  [[ "$(id -u)" == 0 ]] || die "needs root (daemons run as root)"
  ensure_packages
  if [[ -s "$STATE/mode" && "$(cat "$STATE/mode")" != "$mode" ]]; then
    die "a $(cat "$STATE/mode") cluster is up in $STATE; run '$0 down' first"
  fi
  mkdir -p "$STATE"
  echo "$mode" >"$STATE/mode"
  start_munge
  [[ -s "$CONF" ]] || write_conf "$mode"
  start_daemons "$mode"
  wait_idle || die "cluster did not come up"
  log "up ($mode): $(tr '\n' ' ' <"$STATE/nodes")- use: . $STATE/env"
}

stop_pidfile() {
  local pidfile="$1" pid tries
  [[ -s "$pidfile" ]] || return 0
  pid="$(cat "$pidfile")"
  kill -TERM "$pid" 2>/dev/null || return 0
  for tries in $(seq 1 50); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.2
  done
  kill -KILL "$pid" 2>/dev/null || true
}

cmd_down() {
  local pidfile
  if [[ -d "$STATE" ]]; then
    if [[ -s "$CONF" ]]; then
      # Cancel what is still queued or running so slurmd stops its job steps cleanly.
      SLURM_CONF="$CONF" timeout 20 scancel --full --quiet --user=root 2>/dev/null || true
    fi
    for pidfile in "$STATE"/run/slurmd-*.pid; do
      [[ -e "$pidfile" ]] && stop_pidfile "$pidfile"
    done
    stop_pidfile "$STATE/run/slurmctld.pid"
    stop_pidfile "$STATE/run/munged.pid"
    rm -rf "$STATE"
  fi
  rm -rf "$MUNGE_DIR"
  log "down: daemons stopped, $STATE removed"
}

cmd_status() {
  [[ -s "$CONF" ]] || {
    echo "no cluster in $STATE"
    return 1
  }
  SLURM_CONF="$CONF" sinfo -N -o '%N %T %c %m'
  SLURM_CONF="$CONF" GSB_SLURM_WAIT_S=1 wait_idle
}

case "${1:-}" in
up) cmd_up "${2:-local}" ;;
down) cmd_down ;;
status) cmd_status ;;
*)
  sed -n '2,13p' "$0" >&2
  exit 2
  ;;
esac
