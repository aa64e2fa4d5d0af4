#!/usr/bin/env bash
# Runs bank chaos for both stores and fails on any violation: the `make
# chaos` entry point.
#
#   chaos.sh            a few minutes: CHAOS_SEEDS (default "1 2 3") × 45 s per store
#   chaos.sh --ci       one 45 s run per store (under 2 minutes each), seed from the clock
#
# The postgres runs use a private PostgreSQL 15 cluster (CHAOS_PG_CLUSTER,
# default "chaos", on port CHAOS_PG_PORT, default 5441), created and started
# here and stopped at the end, so that the postgres fault restarts that
# cluster and not the machine's main server.
#
# Environment: CHAOS_OUT (run directories and reports, default
# /tmp/ordo-chaos), CHAOS_DURATION (default 45s), CHAOS_SEEDS, CHAOS_STORES
# (default "etcd postgres"), CHAOS_FAULTS (default all).
set -euo pipefail
cd "$(dirname "$0")/../.."

OUT=${CHAOS_OUT:-/tmp/ordo-chaos}
DURATION=${CHAOS_DURATION:-45s}
SEEDS=${CHAOS_SEEDS:-"1 2 3"}
STORES=${CHAOS_STORES:-"etcd postgres"}
FAULTS=${CHAOS_FAULTS:-all}
PG_CLUSTER=${CHAOS_PG_CLUSTER:-chaos}
PG_PORT=${CHAOS_PG_PORT:-5441}
PG_URL="postgres://postgres:ordo@127.0.0.1:${PG_PORT}/postgres?sslmode=disable"

if [ "${1:-}" = --ci ]; then
	SEEDS=$(( $(date +%s) % 100000 ))
fi

log() { echo "chaos.sh: $*" >&2; }
# shellcheck source=pgcluster.sh
source robustness/chaos/pgcluster.sh
trap pg_down EXIT

mkdir -p "$OUT"
log "building the bank command"
go build -o "$OUT/bank" ./examples/bank

# run STORE SEED: one chaos run, its report in $OUT/STORE-SEED.json.
run() {
	local store=$1 seed=$2 dir="$OUT/$1-$2"
	rm -rf "$dir"
	local args=(--seed "$seed" --duration "$DURATION" --store "$store" --faults "$FAULTS"
		--dir "$dir" --report "$OUT/$store-$seed.json")
	if [ "$store" = postgres ]; then
		args+=(--pg "$PG_URL" --pg-restart "pg_ctlcluster 15 $PG_CLUSTER restart")
	fi
	local rc=0
	"$OUT/bank" chaos "${args[@]}" || rc=$?
	# The etcd members' data (hundreds of MB a run) goes; logs and reports stay.
	rm -rf "$dir"/etcd-e*
	return $rc
}

failed=()
for store in $STORES; do
	[ "$store" = postgres ] && pg_up
	for seed in $SEEDS; do
		log "store $store, seed $seed"
		run "$store" "$seed" || failed+=("$store seed $seed")
	done
done
if [ ${#failed[@]} -gt 0 ]; then
	log "FAILED: ${failed[*]} (replay with: bank chaos --store STORE --seed SEED)"
	exit 1
fi
log "all runs passed; reports in $OUT"
