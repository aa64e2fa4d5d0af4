#!/usr/bin/env bash
# The bank benchmark behind `make bench-bank`: ordo against the lock it
# replaces on the same store (ordo-pg vs PostgreSQL SELECT … FOR UPDATE,
# ordo on etcd vs the etcd mutex), one approach after another, on the same
# machine and seeded workloads, with ordo on the in-memory store (ordo-mem:
# nothing durable, the runtime's own cost) as the ceiling of both:
#
#   A: 64 accounts, Zipf 1.1 (a few hot accounts), concurrency 32 and 256
#   B: 10,000 accounts, uniform, concurrency 32 and 256
#
# It starts PostgreSQL if it is not running (and stops it afterwards; etcd is
# embedded in the bench process), runs `bank bench` once per workload and
# writes results/bench/: results.md (both workloads), and per workload a
# directory with its results.md, results.json and chart.png.
#
# Every approach runs BENCH_ROUNDS times at each concurrency, in rounds: the
# ratios are taken within each round and reported with their median, so
# that the machine's drift over the bench does not pass for a difference.
#
# Environment: BENCH_DURATION (per approach, concurrency and round, default
# 10s), BENCH_ROUNDS (default 3), BENCH_SEED (default 1), BENCH_OUT (default
# results/bench).
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION=${BENCH_DURATION:-10s}
ROUNDS=${BENCH_ROUNDS:-3}
SEED=${BENCH_SEED:-1}
OUT=${BENCH_OUT:-results/bench}
APPROACHES=pg-row,ordo-pg,ordo,etcd,ordo-mem
# ordo-mem ÷ pg-row: how far the runtime alone is from the row lock.
COMPARE=ordo-pg:pg-row,ordo:etcd,ordo-mem:pg-row

eval "$(bash lab/lab.sh up pg)"
bin=$(mktemp -d)
trap 'rm -rf "$bin"; bash lab/lab.sh down >/dev/null 2>&1 || true' EXIT
go build -o "$bin/bank" ./examples/bank

mkdir -p "$OUT"
# workload dir title bench-flags...
workload() {
	local dir=$1 title=$2
	shift 2
	echo "bench.sh: $title" >&2
	"$bin/bank" bench --approaches "$APPROACHES" --compare "$COMPARE" --duration "$DURATION" --rounds "$ROUNDS" \
		--seed "$SEED" --pg "$ORDO_PG_URL" --out "$OUT/$dir" "$@"
	{
		echo
		echo "## $title"
		echo
		echo "\`bank bench --approaches $APPROACHES --compare $COMPARE --duration $DURATION --rounds $ROUNDS --seed $SEED $*\`"
		# The workload's report without its title, one heading level down.
		tail -n +2 "$OUT/$dir/results.md" | sed 's/^## /### /'
		echo
		echo "![$title]($dir/chart.png)"
	} >>"$OUT/results.md.tmp"
}

echo "# bank bench" >"$OUT/results.md.tmp"
workload zipf64 "Workload A: 64 accounts, Zipf 1.1" --accounts 64 --zipf 1.1 --concurrency 32,256
workload uniform10000 "Workload B: 10,000 accounts, uniform" --accounts 10000 --zipf 0 --concurrency 32,256
mv "$OUT/results.md.tmp" "$OUT/results.md"
echo "bench.sh: wrote $OUT/results.md" >&2
