# ordo build and test entry points. `make test` is what CI runs.
GO        ?= go
PROTOC    ?= protoc
PROTOC_VERSION := 3.21.12
PROTO_SRCS := $(shell find proto -name '*.proto' | sort)
# The transport's gRPC service gets gRPC stubs; files that declare entity
# services (they import ordo's options) get typed entity clients and servers.
GRPC_SRCS  := proto/ordopb/transport.proto
ORDO_SRCS  := $(shell grep -l '^import "proto/ordopb/options.proto";' $(PROTO_SRCS))
STATICCHECK_VERSION := v0.8.2

.PHONY: test test-short vet proto verify-proto bench bench-bank lint fuzz lab chaos soak mutants

## test: vet, check generated code is current, run every test with the race detector.
test: vet verify-proto
	$(GO) test -race -count=1 -timeout 15m ./...

test-short: vet
	$(GO) test -race -count=1 -short ./...

vet:
	$(GO) vet ./...

## proto: regenerate the committed .pb.go files with the pinned protoc, protoc-gen-go, protoc-gen-go-grpc and protoc-gen-ordo.
proto:
	@$(PROTOC) --version | grep -q "libprotoc $(PROTOC_VERSION)" || { echo "need protoc $(PROTOC_VERSION) (Debian protobuf-compiler), have: $$($(PROTOC) --version)"; exit 1; }
	$(PROTOC) -I . -I /usr/include \
		--plugin=protoc-gen-go=$$($(GO) tool -n protoc-gen-go) \
		--go_out=. --go_opt=paths=source_relative $(PROTO_SRCS)
	$(PROTOC) -I . -I /usr/include \
		--plugin=protoc-gen-go-grpc=$$($(GO) tool -n protoc-gen-go-grpc) \
		--go-grpc_out=. --go-grpc_opt=paths=source_relative $(GRPC_SRCS)
	$(PROTOC) -I . -I /usr/include --plugin=protoc-gen-ordo=$$($(GO) tool -n protoc-gen-ordo) \
		--ordo_out=. --ordo_opt=paths=source_relative $(ORDO_SRCS)

## verify-proto: fail when `make proto` would change a committed file.
verify-proto:
	@tmp=$$(mktemp -d) && trap 'rm -rf $$tmp' EXIT && \
	cp -r proto $$tmp/before && $(MAKE) --no-print-directory proto >/dev/null && \
	if ! diff -r $$tmp/before proto >/dev/null; then \
		diff -r $$tmp/before proto | head -40; rm -rf proto && cp -r $$tmp/before proto; \
		echo "generated protobuf code is stale: run 'make proto' and commit"; exit 1; fi

## bench: benchmarks of every package, reported side by side with their baselines.
bench:
	$(GO) test -run '^$$' -bench . -benchmem -count=1 -timeout 30m ./...

## bench-bank: ordo vs PostgreSQL row locks and vs etcd locks on two workloads, transfers/s, p99 and
## machine CPU per transfer, into results/bench/; starts PostgreSQL. BENCH_DURATION per approach, concurrency
## and round; BENCH_ROUNDS rounds (ratios taken within each, with their median).
BENCH_DURATION ?= 10s
BENCH_ROUNDS ?= 3
bench-bank:
	BENCH_DURATION=$(BENCH_DURATION) BENCH_ROUNDS=$(BENCH_ROUNDS) bash lab/bench.sh

## lint: staticcheck at a pinned version.
lint:
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...

## fuzz: a short run of every fuzz target.
fuzz:
	@for pkg in $$($(GO) list ./...); do \
		for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz'); do \
			$(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime 20s $$pkg || exit 1; \
		done; \
	done

## lab: the lock lab (Redis, Redlock, etcd, ZooKeeper, PostgreSQL locks vs ordo); installs and starts its servers.
lab:
	bash lab/lab.sh

## chaos: a few minutes of mixed faults on a multi-process bank, for both stores.
chaos:
	bash robustness/chaos/chaos.sh

## soak: a 30-minute soak of the multi-process bank per store (SOAK_DURATION, SOAK_STORES): steady load, a fault every
## 3 minutes, every node's resources sampled each minute; fails if the check fails or a series grows (soak.md in /tmp/ordo-soak/STORE).
soak:
	bash robustness/soak/soak.sh

## mutants: break each safety guard in turn (tools/mutants), run its package's tests, and fail if a mutant survives.
## Takes minutes; not part of `make test`. MUTANTS='-run actors/' selects some; the PostgreSQL ones need ORDO_PG_URL.
mutants:
	$(GO) run ./tools/mutants $(MUTANTS)
