#!/usr/bin/env bash
# Start or stop a Docker daemon for the test suite.
#   docker.sh start   install Debian's docker.io if missing, start dockerd if it is not
#                     answering, and remember that we started it
#   docker.sh stop    stop dockerd again, but only if `start` started it
set -euo pipefail
state_dir=${GPURIG_STATE_DIR:-/tmp/gpurig-test}
pidfile=$state_dir/dockerd.pid
mkdir -p "$state_dir"

# close_inherited_fds: close every descriptor above stderr in this (sub)shell.
close_inherited_fds() {
  local fd
  for fd in /proc/$BASHPID/fd/*; do
    fd=${fd##*/}
    [ "$fd" -gt 2 ] && eval "exec $fd>&-"
  done
  return 0
}

wait_for_docker() {
  for _ in $(seq 1 60); do
    docker info >/dev/null 2>&1 && return 0
    sleep 1
  done
  echo "dockerd did not answer within 60 s; see $state_dir/dockerd.log" >&2
  return 1
}

case "${1:-}" in
  start)
    if docker info >/dev/null 2>&1; then
      echo "docker: daemon already running, leaving it alone"
      exit 0
    fi
    if [ ! -x /usr/sbin/dockerd ]; then
      echo "docker: installing Debian's docker.io"
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends docker.io >/dev/null
    fi
    echo "docker: starting dockerd (log: $state_dir/dockerd.log)"
    # Without the descriptors this script inherited: dockerd outlives the suite, and a lock held on one
    # (`flock LOCK scripts/test.sh ...`, as the scenarios are serialised) would stay held by dockerd.
    (close_inherited_fds; exec setsid /usr/sbin/dockerd >"$state_dir/dockerd.log" 2>&1 </dev/null) &
    echo $! >"$pidfile"
    wait_for_docker
    ;;
  stop)
    if [ -f "$pidfile" ]; then
      pid=$(cat "$pidfile")
      echo "docker: stopping the dockerd this suite started (pid $pid)"
      kill "$pid" 2>/dev/null || true
      for _ in $(seq 1 30); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
      rm -f "$pidfile"
    fi
    ;;
  *)
    echo "usage: $0 start|stop" >&2
    exit 2
    ;;
esac
