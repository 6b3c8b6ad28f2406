#!/usr/bin/env bash
# Serve .work/www (stand-in apt repos, wheels, installer fixtures) to the test containers.
# Bridged containers cannot reach the host's 127.0.0.1, so bind the docker0 address.
#   serve.sh start | stop | url
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
state_dir=${GPURIG_STATE_DIR:-/tmp/gpurig-test}
port=${GPURIG_SERVE_PORT:-8765}
pidfile=$state_dir/http.pid
mkdir -p "$state_dir"

addr() { ip -4 -o addr show docker0 2>/dev/null | awk '{print $4}' | cut -d/ -f1 | head -n1; }

case "${1:-}" in
  url)
    echo "http://$(addr):$port"
    ;;
  start)
    a=$(addr)
    [ -n "$a" ] || { echo "serve: no docker0 address; start docker first" >&2; exit 1; }
    if [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then exit 0; fi
    mkdir -p "$here/.work/www"
    setsid python3 -m http.server --bind "$a" --directory "$here/.work/www" "$port" \
      >"$state_dir/http.log" 2>&1 </dev/null &
    echo $! >"$pidfile"
    for _ in $(seq 1 50); do
      python3 -c "import urllib.request,sys; urllib.request.urlopen(sys.argv[1], timeout=1)" \
        "http://$a:$port/" 2>/dev/null && { echo "serve: http://$a:$port/ -> .work/www"; exit 0; }
      sleep 0.2
    done
    echo "serve: server did not come up; see $state_dir/http.log" >&2
    exit 1
    ;;
  stop)
    if [ -f "$pidfile" ]; then kill "$(cat "$pidfile")" 2>/dev/null || true; rm -f "$pidfile"; fi
    ;;
  *) echo "usage: $0 start|stop|url" >&2; exit 2 ;;
esac
