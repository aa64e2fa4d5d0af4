#!/usr/bin/env bash
# Runs the lock lab: installs and starts the servers the lock baselines need
# (5 redis-server, ZooKeeper, PostgreSQL 15; etcd is embedded in the lab
# process), runs the lab through `bank bench` (every lock approach, and
# ordo on the etcd and the PostgreSQL store), and stops what it started.
#
#   lab.sh [--smoke] [lab flags...]   start, run the lab, stop
#   lab.sh test [go test flags...]    start, go test ./lab/... with
#                                     ORDO_REQUIRE_LAB=1, stop
#   lab.sh up [pg]                    start and print the environment to export
#                                     (with pg: PostgreSQL only)
#   lab.sh down                       stop what `up` started
#
# --smoke is a seconds-long run with no stalls that fails unless every
# approach completes transfers and passes conservation and exactly-once.
# Any other flags go to the lab (see `go run ./examples/bank bench -h`),
# e.g. lab.sh --approaches redis,etcd --duration 5s --stall-prob 0.05.
#
# Environment: LAB_STATE (state dir, default /tmp/ordo-lab), LAB_REDIS_PORTS
# (default "6391 6392 6393 6394 6395"), LAB_ZK_PORT (default 2191).
set -euo pipefail
cd "$(dirname "$0")/.."

STATE=${LAB_STATE:-/tmp/ordo-lab}
REDIS_PORTS=${LAB_REDIS_PORTS:-"6391 6392 6393 6394 6395"}
ZK_PORT=${LAB_ZK_PORT:-2191}
ZK_BIN=/usr/share/zookeeper/bin/zkServer.sh
PG_URL="postgres://postgres:ordo@127.0.0.1:5432/ordo_test?sslmode=disable"

log() { echo "lab.sh: $*" >&2; }

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

# install [pg]: install the servers (PostgreSQL only with pg).
install() {
	local need=()
	if [ "${1:-}" != pg ]; then
		command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
		[ -x "$ZK_BIN" ] || need+=(zookeeper)
	fi
	command -v pg_ctlcluster >/dev/null 2>&1 || need+=(postgresql-15)
	if [ ${#need[@]} -gt 0 ]; then
		log "installing ${need[*]}"
		export DEBIAN_FRONTEND=noninteractive
		as_root apt-get update -qq
		as_root apt-get install -y -qq "${need[@]}" >/dev/null
	fi
}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

wait_port() {
	local i
	for i in $(seq 1 120); do
		port_open "$1" && return 0
		sleep 0.25
	done
	log "nothing listens on 127.0.0.1:$1 after 30s"
	return 1
}

# up [pg]: start the servers (PostgreSQL only with pg).
up() {
	local only=${1:-}
	install "$only"
	mkdir -p "$STATE"
	[ "$only" = pg ] || up_redis_zk
	up_pg
}

up_redis_zk() {
	local p
	for p in $REDIS_PORTS; do
		if port_open "$p"; then
			log "port $p already in use; using the redis-server there"
			continue
		fi
		redis-server --port "$p" --bind 127.0.0.1 --save '' --appendonly no \
			--daemonize yes --dir "$STATE" --pidfile "$STATE/redis-$p.pid" \
			--logfile "$STATE/redis-$p.log"
		echo "$p" >>"$STATE/started-redis"
	done
	if port_open "$ZK_PORT"; then
		log "port $ZK_PORT already in use; using the ZooKeeper there"
	else
		mkdir -p "$STATE/zk/data"
		cat >"$STATE/zk/zoo.cfg" <<CFG
tickTime=500
minSessionTimeout=1000
maxSessionTimeout=30000
initLimit=10
syncLimit=5
dataDir=$STATE/zk/data
clientPort=$ZK_PORT
clientPortAddress=127.0.0.1
admin.enableServer=false
4lw.commands.whitelist=ruok,srvr
CFG
		ZOO_LOG_DIR="$STATE/zk" ZOOPIDFILE="$STATE/zk/zk.pid" "$ZK_BIN" start "$STATE/zk/zoo.cfg" >/dev/null 2>&1
		touch "$STATE/started-zk"
	fi
	for p in $REDIS_PORTS $ZK_PORT; do wait_port "$p"; done
	for p in $REDIS_PORTS; do redis-cli -p "$p" ping >/dev/null; done
}

up_pg() {
	if ! su postgres -c "pg_isready -q -h 127.0.0.1" 2>/dev/null; then
		pg_ctlcluster 15 main start
		touch "$STATE/started-pg"
		local i
		for i in $(seq 1 60); do
			su postgres -c "pg_isready -q" && break
			sleep 0.5
		done
	fi
	su postgres -c "psql -qtAc \"ALTER USER postgres PASSWORD 'ordo'\"" >/dev/null
	su postgres -c "psql -qtAc \"SELECT 1 FROM pg_database WHERE datname='ordo_test'\"" | grep -q 1 ||
		su postgres -c "createdb ordo_test"
}

down() {
	local p
	if [ -f "$STATE/started-redis" ]; then
		for p in $(cat "$STATE/started-redis"); do
			redis-cli -p "$p" shutdown nosave >/dev/null 2>&1 || true
		done
		rm -f "$STATE/started-redis"
	fi
	if [ -f "$STATE/started-zk" ]; then
		ZOO_LOG_DIR="$STATE/zk" ZOOPIDFILE="$STATE/zk/zk.pid" "$ZK_BIN" stop "$STATE/zk/zoo.cfg" >/dev/null 2>&1 || true
		rm -f "$STATE/started-zk"
	fi
	if [ -f "$STATE/started-pg" ]; then
		pg_ctlcluster 15 main stop || true
		rm -f "$STATE/started-pg"
	fi
}

redis_addrs() {
	local out="" p
	for p in $REDIS_PORTS; do out="${out:+$out,}127.0.0.1:$p"; done
	echo "$out"
}

# print_env [pg]: the environment of the servers up started.
print_env() {
	if [ "${1:-}" != pg ]; then
		echo "export ORDO_REDIS_ADDRS=$(redis_addrs)"
		echo "export ORDO_ZK_ADDRS=127.0.0.1:$ZK_PORT"
	fi
	echo "export ORDO_PG_URL='$PG_URL'"
}

case "${1:-}" in
up)
	case "${2:-}" in
	"" | pg) ;;
	*)
		log "usage: lab.sh up [pg]"
		exit 2
		;;
	esac
	up "${2:-}"
	print_env "${2:-}"
	;;
down)
	down
	;;
test)
	shift
	trap down EXIT
	up
	ORDO_REDIS_ADDRS=$(redis_addrs) ORDO_ZK_ADDRS=127.0.0.1:$ZK_PORT ORDO_PG_URL=$PG_URL ORDO_REQUIRE_LAB=1 \
		go test -race -count=1 "$@" ./lab/...
	;;
*)
	args=()
	if [ "${1:-}" = "--smoke" ]; then
		shift
		args=(--duration 2s --concurrency 4 --accounts 16 --stall-prob 0 --check)
	fi
	trap down EXIT
	up
	go run ./examples/bank bench \
		--redis "$(redis_addrs)" --zk "127.0.0.1:$ZK_PORT" --pg "$PG_URL" \
		"${args[@]}" "$@"
	;;
esac
