#!/usr/bin/env bash
# Test hosts for the multi-node bench: network namespaces with their own addresses, wired to one
# bridge with veth pairs, each running its own sshd (root, key only) on its own address.
#
#   tests/infra/netns.sh up [COUNT]   create COUNT hosts (default 2, at most 8); idempotent
#   tests/infra/netns.sh down         stop everything `up` started and remove every trace
#   tests/infra/netns.sh status       show what exists; exit 1 when a host is not answering on ssh
#   tests/infra/netns.sh exec NAME -- COMMAND...
#                                     run COMMAND as host NAME (its network, hostname, /etc/hosts
#                                     and /root/.ssh), e.g. to start a daemon there
#
# Each host has its own network stack, hostname (UTS namespace) and /root/.ssh (a bind mount of
# a per-host directory inside that host's mount namespace), so "ssh between nodes", "authorize a
# key on all nodes" and "ssh-keyscan" behave as on separate servers. Everything else, including
# the repository's .venv, is this machine's filesystem: the hosts look like a cluster with a shared
# filesystem. Traffic stays on the private subnet below; the hosts get no default route.
#
# Settings (environment):
#   GSB_NETNS_PREFIX   name prefix of namespaces, links and hostnames (default gsb)
#   GSB_NETNS_SUBNET   first three octets of the /24 used (default 10.213.0): the bridge is .1,
#                      host i is .(10+i)
#   GSB_NETNS_STATE    state directory: keys, sshd configs, logs, nodes.json (default
#                      /tmp/gpurig-netns)
#   GSB_NETNS_SSH_PORT port every host's sshd listens on (default 2213); one port for all hosts
#                      because horovodrun -p takes a single port
#
# After `up`, the state directory holds:
#   id_ed25519[.pub]  the test client key, authorized for root on every host
#   known_hosts       every host's key, as "[addr]:port" lines
#   ssh_config        Host entries (by hostname and address) using the two files above
#   nodes.json        [{"name", "address", "port", "netns"}, ...] for the tests
set -euo pipefail

PREFIX="${GSB_NETNS_PREFIX:-gsb}"
SUBNET="${GSB_NETNS_SUBNET:-10.213.0}"
STATE="${GSB_NETNS_STATE:-/tmp/gpurig-netns}"
PORT="${GSB_NETNS_SSH_PORT:-2213}"
BRIDGE="${PREFIX}br0"
FW_COMMENT="${PREFIX}-netns-test-bridge"
MAX_HOSTS=8

log() { printf 'netns.sh: %s\n' "$*" >&2; }
die() {
  log "error: $*"
  exit 1
}

need() {
  local tool
  for tool in "$@"; do
    command -v "$tool" >/dev/null 2>&1 || die "missing tool '$tool' (apt-get install iproute2 openssh-server openssh-client util-linux)"
  done
}

host_name() { printf '%s%s' "$PREFIX" "$1"; }
host_addr() { printf '%s.%s' "$SUBNET" "$((10 + $1))"; }

# Hosts created earlier, from the namespaces that exist (so `down` works without knowing COUNT).
existing_indices() {
  ip netns list 2>/dev/null | awk '{print $1}' | sed -n "s/^${PREFIX}\([0-9]\+\)$/\1/p" | sort -n
}

sshd_running() {
  local pidfile="$STATE/$(host_name "$1")/sshd.pid"
  [[ -s "$pidfile" ]] && kill -0 "$(cat "$pidfile")" 2>/dev/null
}

ensure_bridge() {
  if ! ip link show "$BRIDGE" >/dev/null 2>&1; then
    ip link add "$BRIDGE" type bridge
  fi
  if ! ip -4 addr show dev "$BRIDGE" | grep -q "inet ${SUBNET}.1/24"; then
    ip addr add "${SUBNET}.1/24" dev "$BRIDGE"
  fi
  ip link set "$BRIDGE" up
  # With br_netfilter loaded, bridged frames traverse iptables FORWARD, whose policy is DROP once
  # dockerd has run. Accept exactly this bridge's own traffic.
  if command -v iptables >/dev/null 2>&1 && iptables -S FORWARD >/dev/null 2>&1; then
    if ! iptables -C FORWARD -i "$BRIDGE" -o "$BRIDGE" -m comment --comment "$FW_COMMENT" -j ACCEPT 2>/dev/null; then
      iptables -I FORWARD -i "$BRIDGE" -o "$BRIDGE" -m comment --comment "$FW_COMMENT" -j ACCEPT
    fi
  fi
}

ensure_client_key() {
  mkdir -p "$STATE"
  chmod 700 "$STATE"
  if [[ ! -s "$STATE/id_ed25519" ]]; then
    ssh-keygen -q -t ed25519 -N '' -C "gpurig-netns-test" -f "$STATE/id_ed25519"
  fi
}

ensure_host_files() {
  local i="$1" name dir
  name="$(host_name "$i")"
  dir="$STATE/$name"
  mkdir -p "$dir/dot-ssh"
  chmod 700 "$dir" "$dir/dot-ssh"
  if [[ ! -s "$dir/ssh_host_ed25519_key" ]]; then
    ssh-keygen -q -t ed25519 -N '' -C "$name" -f "$dir/ssh_host_ed25519_key"
  fi
  # The host's own ~/.ssh starts with the test key authorized; anything else in it (a key the
  # playbook generated, known_hosts) is the host's own business and survives a repeated `up`.
  touch "$dir/dot-ssh/authorized_keys"
  chmod 600 "$dir/dot-ssh/authorized_keys"
  if ! grep -qxF "$(cat "$STATE/id_ed25519.pub")" "$dir/dot-ssh/authorized_keys"; then
    cat "$STATE/id_ed25519.pub" >>"$dir/dot-ssh/authorized_keys"
  fi
  cat >"$dir/sshd_config" <<EOF
# sshd for test host $name ($(host_addr "$i")), written by tests/infra/netns.sh
ListenAddress $(host_addr "$i"):$PORT
HostKey $dir/ssh_host_ed25519_key
PidFile $dir/sshd.pid
PermitRootLogin prohibit-password
AllowUsers root
PubkeyAuthentication yes
AuthorizedKeysFile .ssh/authorized_keys
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes yes
X11Forwarding no
PrintMotd no
UseDNS no
MaxStartups 64:30:128
MaxSessions 64
ClientAliveInterval 15
ClientAliveCountMax 4
Subsystem sftp internal-sftp
LogLevel VERBOSE
EOF
}

ensure_netns() {
  local i="$1" name addr peer
  name="$(host_name "$i")"
  addr="$(host_addr "$i")"
  peer="${PREFIX}v${i}"
  if ! ip netns list | awk '{print $1}' | grep -qx "$name"; then
    ip netns add "$name"
  fi
  if ! ip link show "$peer" >/dev/null 2>&1; then
    ip link add "$peer" type veth peer name eth0 netns "$name"
  fi
  ip link set "$peer" master "$BRIDGE"
  ip link set "$peer" up
  ip -n "$name" link set lo up
  ip -n "$name" link set eth0 up
  if ! ip -n "$name" -4 addr show dev eth0 | grep -q "inet ${addr}/24"; then
    ip -n "$name" addr add "${addr}/24" dev eth0
  fi
}

write_etc_hosts() {
  # Each host resolves its own hostname to its own address and knows its peers by name; the file
  # is bind-mounted over /etc/hosts inside that host only (see enter_host).
  local count="$1" i j
  for i in $(seq 1 "$count"); do
    {
      printf '127.0.0.1\tlocalhost\n'
      for j in $(seq 1 "$count"); do
        printf '%s\t%s\n' "$(host_addr "$j")" "$(host_name "$j")"
      done
    } >"$STATE/$(host_name "$i")/hosts"
  done
}

# Run a command as host NAME sees the world: its network namespace, its own hostname (a new UTS
# namespace) and a private mount namespace in which its hosts file and its own .ssh directory are
# bind-mounted over /etc/hosts and /root/.ssh. nsenter --net is used rather than `ip netns exec`
# because the latter remounts /sys, which hides the cgroup hierarchy slurmd needs.
enter_host() {
  local name="$1"
  shift
  local dir="$STATE/$name"
  [[ -e "/run/netns/$name" ]] || die "no test host '$name' (run: $0 up)"
  mkdir -p /root/.ssh
  chmod 700 /root/.ssh
  nsenter --net="/run/netns/$name" -- unshare --uts --mount --propagation private -- \
    sh -ec 'hostname "$1"; mount --bind "$2/hosts" /etc/hosts; mount --bind "$2/dot-ssh" /root/.ssh; shift 2; exec "$@"' \
    enter-host "$name" "$dir" "$@"
}

start_sshd() {
  local i="$1" name dir
  name="$(host_name "$i")"
  dir="$STATE/$name"
  if sshd_running "$i"; then
    return
  fi
  mkdir -p /run/sshd
  /usr/sbin/sshd -t -f "$dir/sshd_config" || die "sshd rejected $dir/sshd_config"
  enter_host "$name" /usr/sbin/sshd -f "$dir/sshd_config" -E "$dir/sshd.log"
}

wait_for_ssh() {
  local i="$1" name addr tries
  name="$(host_name "$i")"
  addr="$(host_addr "$i")"
  for tries in $(seq 1 50); do
    if ssh -F "$STATE/ssh_config" -o ConnectTimeout=2 "$name" true 2>/dev/null; then
      return 0
    fi
    sleep 0.2
  done
  ssh -F "$STATE/ssh_config" -o ConnectTimeout=2 "$name" true || true
  die "host $name ($addr:$PORT) does not accept ssh after $tries tries; see $STATE/$name/sshd.log"
}

write_client_files() {
  local count="$1" i name addr sep=""
  : >"$STATE/known_hosts"
  : >"$STATE/ssh_config"
  printf '[' >"$STATE/nodes.json"
  for i in $(seq 1 "$count"); do
    name="$(host_name "$i")"
    addr="$(host_addr "$i")"
    printf '[%s]:%s,[%s]:%s %s\n' "$addr" "$PORT" "$name" "$PORT" \
      "$(cut -d' ' -f1,2 "$STATE/$name/ssh_host_ed25519_key.pub")" >>"$STATE/known_hosts"
    cat >>"$STATE/ssh_config" <<EOF
Host $name $addr
  HostName $addr
  Port $PORT
  User root
  IdentityFile $STATE/id_ed25519
  IdentitiesOnly yes
  UserKnownHostsFile $STATE/known_hosts
  StrictHostKeyChecking yes
  BatchMode yes
EOF
    printf '%s{"name": "%s", "address": "%s", "port": %s, "netns": "%s"}' \
      "$sep" "$name" "$addr" "$PORT" "$name" >>"$STATE/nodes.json"
    sep=", "
  done
  printf ']\n' >>"$STATE/nodes.json"
}

cmd_up() {
  local count="${1:-2}" i
  [[ "$count" =~ ^[0-9]+$ ]] && ((count >= 1 && count <= MAX_HOSTS)) || die "COUNT must be 1..$MAX_HOSTS, got '$count'"
  [[ "$(id -u)" == 0 ]] || die "needs root (network namespaces, bind mounts)"
  need ip ssh ssh-keygen nsenter unshare mount /usr/sbin/sshd
  ensure_bridge
  ensure_client_key
  for i in $(seq 1 "$count"); do
    ensure_host_files "$i"
    ensure_netns "$i"
  done
  write_etc_hosts "$count"
  write_client_files "$count"
  for i in $(seq 1 "$count"); do
    start_sshd "$i"
  done
  for i in $(seq 1 "$count"); do
    wait_for_ssh "$i"
  done
  log "up: $count host(s) on ${SUBNET}.0/24, ssh port $PORT, state in $STATE"
}

cmd_down() {
  local i name pid pids tries
  for i in $(existing_indices); do
    name="$(host_name "$i")"
    # Everything still running inside the namespace was started there by sshd or the tests.
    pids="$(ip netns pids "$name" 2>/dev/null || true)"
    for pid in $pids; do kill -TERM "$pid" 2>/dev/null || true; done
    for tries in $(seq 1 25); do
      pids="$(ip netns pids "$name" 2>/dev/null || true)"
      [[ -z "$pids" ]] && break
      sleep 0.2
    done
    for pid in $pids; do kill -KILL "$pid" 2>/dev/null || true; done
    ip netns del "$name" 2>/dev/null || true
  done
  # The host-side veth ends vanish with their namespaces; a half-made one may not have.
  for i in $(seq 1 "$MAX_HOSTS"); do
    ip link del "${PREFIX}v${i}" 2>/dev/null || true
  done
  if command -v iptables >/dev/null 2>&1; then
    while iptables -D FORWARD -i "$BRIDGE" -o "$BRIDGE" -m comment --comment "$FW_COMMENT" -j ACCEPT 2>/dev/null; do :; done
  fi
  ip link del "$BRIDGE" 2>/dev/null || true
  rm -rf "$STATE"
  log "down: removed namespaces, links, firewall rule and $STATE"
}

cmd_status() {
  local i name rc=0
  ip -br addr show dev "$BRIDGE" 2>/dev/null || {
    echo "no bridge $BRIDGE"
    rc=1
  }
  for i in $(existing_indices); do
    name="$(host_name "$i")"
    if [[ -s "$STATE/ssh_config" ]] && ssh -F "$STATE/ssh_config" -o ConnectTimeout=2 "$name" true 2>/dev/null; then
      echo "$name $(host_addr "$i"):$PORT ssh ok"
    else
      echo "$name $(host_addr "$i"):$PORT ssh FAILED"
      rc=1
    fi
  done
  return "$rc"
}

case "${1:-}" in
up) cmd_up "${2:-2}" ;;
down) cmd_down ;;
exec)
  [[ $# -ge 3 && "$3" == "--" ]] || die "usage: $0 exec NAME -- COMMAND [ARG...]"
  name="$2"
  shift 3
  enter_host "$name" "$@"
  ;;
status) cmd_status ;;
*)
  sed -n '2,12p' "$0" >&2
  exit 2
  ;;
esac
