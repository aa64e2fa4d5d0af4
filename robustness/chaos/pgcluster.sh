# Sourced by chaos.sh and soak/soak.sh: a private PostgreSQL 15 cluster
# (PG_CLUSTER on PG_PORT), created and started by pg_up and stopped by
# pg_down if pg_up started it, so that the postgres fault restarts that
# cluster and not the machine's main server. Needs log().
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
as_postgres() { if [ "$(id -u)" = 0 ]; then su postgres -c "$1"; else sudo -u postgres sh -c "$1"; fi; }

pg_started=
pg_up() {
	if ! command -v pg_ctlcluster >/dev/null 2>&1; then
		export DEBIAN_FRONTEND=noninteractive
		as_root apt-get update -qq
		as_root apt-get install -y -qq postgresql-15 >/dev/null
	fi
	if ! pg_lsclusters -h | awk '$1 == 15 {print $2}' | grep -qx "$PG_CLUSTER"; then
		log "creating PostgreSQL cluster 15/$PG_CLUSTER on port $PG_PORT"
		as_root pg_createcluster 15 "$PG_CLUSTER" --port "$PG_PORT" >/dev/null
	fi
	as_root pg_ctlcluster 15 "$PG_CLUSTER" start 2>/dev/null && pg_started=1 || true
	for _ in $(seq 1 60); do
		as_postgres "pg_isready -q -p $PG_PORT" && break
		sleep 0.5
	done
	as_postgres "psql -p $PG_PORT -qtAc \"ALTER USER postgres PASSWORD 'ordo'\"" >/dev/null
}
pg_down() { if [ -n "$pg_started" ]; then as_root pg_ctlcluster 15 "$PG_CLUSTER" stop || true; fi; }
