#!/usr/bin/env bash
# A real 3-member etcd cluster on loopback, for trying the etcd backend and for the tests.
#
#   scripts/etcd-cluster.sh start   DIR   start 3 members (free ports, data and logs under DIR), wait until
#                                         every member is healthy, print the client endpoints (a,b,c)
#   scripts/etcd-cluster.sh stop    DIR   stop every member (TERM, then KILL after 10 s)
#   scripts/etcd-cluster.sh status  DIR   one line per member: name, endpoint, pid, health
#   scripts/etcd-cluster.sh endpoints DIR print the client endpoints
#   scripts/etcd-cluster.sh kill    DIR N kill -9 member N (1..3)          (fault tests)
#   scripts/etcd-cluster.sh restart DIR N start member N again on its data (fault tests)
#
# Environment: LIBRARYFS_ETCD_QUOTA_BYTES (default 0 = etcd's 2 GiB), LIBRARYFS_ETCD_ARGS (more etcd flags),
# LIBRARYFS_ETCD_START_TIMEOUT_S (default 60). Members compact their history every 5 minutes' worth of revisions
# (--auto-compaction-mode=periodic --auto-compaction-retention=5m): without it etcd 3.4 keeps every
# revision forever and the quota fills with old versions.
# Exit codes: 0 ok, 1 failure (message on stderr), 2 usage, 3 etcd not installed.
set -euo pipefail

usage() { echo "usage: $0 start|stop|status|endpoints DIR | kill|restart DIR N" >&2; exit 2; }
[ $# -ge 2 ] || usage
cmd=$1
dir=$2
N=3

need_etcd() {
  if ! command -v etcd >/dev/null || ! command -v etcdctl >/dev/null; then
    echo "etcd is not installed (apt-get install etcd-server etcd-client)" >&2
    exit 3
  fi
}

free_ports() {  # print $1 distinct free TCP ports on 127.0.0.1 (bound together, then released)
  python3 - "$1" <<'EOF'
import socket, sys
socks = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))
EOF
}

pid_alive() { [ -n "${1:-}" ] && kill -0 "$1" 2>/dev/null; }

member_pid() { cat "$dir/m$1/pid" 2>/dev/null || true; }

endpoints() { cat "$dir/endpoints"; }

launch() {  # launch member $1 from its recorded command line, in its own session, log to mN.log
  local i=$1
  # shellcheck disable=SC2046
  # a clean environment: etcd reads ETCD_* variables and refuses to start when one shadows a flag
  env -i PATH="$PATH" setsid $(cat "$dir/m$i/cmd") >>"$dir/m$i.log" 2>&1 < /dev/null &
  echo $! > "$dir/m$i/pid"
}

wait_healthy() {  # wait until every listed endpoint answers a quorum read
  local eps=$1 i deadline=$(( $(date +%s) + ${LIBRARYFS_ETCD_START_TIMEOUT_S:-60} ))
  while :; do
    if etcdctl --endpoints="$eps" --dial-timeout=2s --command-timeout=3s endpoint health >/dev/null 2>&1; then
      return 0
    fi
    for i in 1 2 3; do
      if ! pid_alive "$(member_pid $i)"; then echo "etcd member m$i exited (log: $dir/m$i.log):" >&2; tail -3 "$dir/m$i.log" >&2; return 1; fi
    done
    if [ "$(date +%s)" -ge "$deadline" ]; then
      echo "etcd cluster in $dir not healthy after ${LIBRARYFS_ETCD_START_TIMEOUT_S:-60} s (logs: $dir/m*.log)" >&2
      etcdctl --endpoints="$eps" --dial-timeout=2s endpoint health >&2 || true
      return 1
    fi
    sleep 0.2
  done
}

start() {
  need_etcd
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  for i in 1 2 3; do
    if pid_alive "$(member_pid $i)"; then echo "member m$i in $dir is already running" >&2; exit 1; fi
  done
  read -r -a ports <<< "$(free_ports $((2 * N)))"
  local initial="" eps="" token i
  token="libraryfs-$(basename "$dir")-$$"
  for i in 1 2 3; do
    initial="${initial:+$initial,}m$i=http://127.0.0.1:${ports[$((N + i - 1))]}"
    eps="${eps:+$eps,}http://127.0.0.1:${ports[$((i - 1))]}"
  done
  for i in 1 2 3; do
    mkdir -p "$dir/m$i"
    local c=${ports[$((i - 1))]} p=${ports[$((N + i - 1))]}
    echo "etcd --name m$i --data-dir $dir/m$i/data \
      --listen-client-urls http://127.0.0.1:$c --advertise-client-urls http://127.0.0.1:$c \
      --listen-peer-urls http://127.0.0.1:$p --initial-advertise-peer-urls http://127.0.0.1:$p \
      --initial-cluster $initial --initial-cluster-state new --initial-cluster-token $token \
      --quota-backend-bytes ${LIBRARYFS_ETCD_QUOTA_BYTES:-0} \
      --auto-compaction-mode periodic --auto-compaction-retention 5m \
      --logger zap --log-outputs stderr ${LIBRARYFS_ETCD_ARGS:-}" > "$dir/m$i/cmd"
  done
  echo "$eps" > "$dir/endpoints"
  for i in 1 2 3; do launch $i; done
  if ! wait_healthy "$eps"; then stop; exit 1; fi
  echo "$eps"
}

stop() {
  local i pid deadline
  for i in 1 2 3; do pid=$(member_pid $i); pid_alive "$pid" && kill -TERM "$pid" 2>/dev/null || true; done
  deadline=$(( $(date +%s) + 10 ))
  for i in 1 2 3; do
    pid=$(member_pid $i)
    while pid_alive "$pid" && [ "$(date +%s)" -lt "$deadline" ]; do sleep 0.1; done
    if pid_alive "$pid"; then kill -KILL "$pid" 2>/dev/null || true; fi
    rm -f "$dir/m$i/pid"
  done
}

status() {
  need_etcd
  local i pid ep health
  IFS=, read -r -a eps <<< "$(endpoints)"
  for i in 1 2 3; do
    pid=$(member_pid $i); ep=${eps[$((i - 1))]}
    if ! pid_alive "$pid"; then echo "m$i $ep stopped"; continue; fi
    if etcdctl --endpoints="$ep" --dial-timeout=2s --command-timeout=3s endpoint health >/dev/null 2>&1; then
      health=healthy
    else
      health=unhealthy
    fi
    echo "m$i $ep pid=$pid $health"
  done
}

member_arg() {
  [ $# -ge 3 ] && [[ "$3" =~ ^[123]$ ]] || usage
  echo "$3"
}

case "$cmd" in
  start) start ;;
  stop) [ -f "$dir/endpoints" ] || { echo "no cluster in $dir" >&2; exit 1; }; stop ;;
  status) [ -f "$dir/endpoints" ] || { echo "no cluster in $dir" >&2; exit 1; }; status ;;
  endpoints) endpoints ;;
  kill)
    i=$(member_arg "$@"); pid=$(member_pid "$i")
    pid_alive "$pid" && kill -KILL "$pid"
    for _ in $(seq 100); do pid_alive "$pid" || break; sleep 0.05; done
    rm -f "$dir/m$i/pid" ;;
  restart)
    need_etcd
    i=$(member_arg "$@")
    if pid_alive "$(member_pid "$i")"; then echo "member m$i is running" >&2; exit 1; fi
    launch "$i" ;;
  *) usage ;;
esac
