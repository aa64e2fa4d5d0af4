#!/usr/bin/env bash
# Runs bank soak for each store and fails unless every run passes: the
# `make soak` entry point.
#
#   soak.sh         SOAK_DURATION (default 30m) for each of SOAK_STORES (default "etcd postgres")
#   soak.sh --ci    one 2-minute run, on the etcd or the postgres store as the clock's
#                   seconds are even or odd, fault seed from the clock
#
# The postgres runs use the private PostgreSQL 15 cluster of chaos.sh
# (SOAK_PG_CLUSTER, default "chaos", on SOAK_PG_PORT, default 5441), so that
# the postgres fault restarts that cluster and not the machine's main server.
#
# Environment: SOAK_OUT (run directories, default /tmp/ordo-soak; each run's
# soak.json, soak.png and soak.md are in $SOAK_OUT/STORE), SOAK_DURATION,
# SOAK_STORES, SOAK_SEED (default: from the clock), SOAK_FAULT_INTERVAL and
# SOAK_SAMPLE_EVERY (default: scaled to the duration), SOAK_FAULTS (default
# all). The etcd members' data directories are removed after each run.
set -euo pipefail
cd "$(dirname "$0")/../.."

OUT=${SOAK_OUT:-/tmp/ordo-soak}
DURATION=${SOAK_DURATION:-30m}
STORES=${SOAK_STORES:-"etcd postgres"}
SEED=${SOAK_SEED:-$(( $(date +%s) % 100000 ))}
FAULTS=${SOAK_FAULTS:-all}
PG_CLUSTER=${SOAK_PG_CLUSTER:-chaos}
PG_PORT=${SOAK_PG_PORT:-5441}
PG_URL="postgres://postgres:ordo@127.0.0.1:${PG_PORT}/postgres?sslmode=disable"

if [ "${1:-}" = --ci ]; then
	DURATION=2m
	if [ $(( $(date +%s) % 2 )) = 0 ]; then STORES=etcd; else STORES=postgres; fi
fi

log() { echo "soak.sh: $*" >&2; }
# shellcheck source=../chaos/pgcluster.sh
source robustness/chaos/pgcluster.sh
trap pg_down EXIT

mkdir -p "$OUT"
log "building the bank command"
go build -o "$OUT/bank" ./examples/bank

# run STORE: one soak, in $OUT/STORE.
run() {
	local store=$1 dir="$OUT/$1"
	rm -rf "$dir"
	local args=(--seed "$SEED" --duration "$DURATION" --store "$store" --faults "$FAULTS" --dir "$dir")
	[ -n "${SOAK_FAULT_INTERVAL:-}" ] && args+=(--fault-interval "$SOAK_FAULT_INTERVAL")
	[ -n "${SOAK_SAMPLE_EVERY:-}" ] && args+=(--sample-every "$SOAK_SAMPLE_EVERY")
	if [ "$store" = postgres ]; then
		args+=(--pg "$PG_URL" --pg-restart "pg_ctlcluster 15 $PG_CLUSTER restart")
	fi
	local rc=0
	"$OUT/bank" soak "${args[@]}" || rc=$?
	rm -rf "$dir"/etcd-e*
	return $rc
}

failed=()
for store in $STORES; do
	[ "$store" = postgres ] && pg_up
	log "store $store, $DURATION, seed $SEED"
	run "$store" || failed+=("$store")
done
if [ ${#failed[@]} -gt 0 ]; then
	log "FAILED: ${failed[*]} (seed $SEED; reports in $OUT/STORE/soak.md)"
	exit 1
fi
log "every soak passed; reports in $OUT/STORE/soak.md"
