// Package ordolab plugs ordo into the lock lab (package lab) as one more
// approach: the accounts are ledger entities on an in-process ordo cluster
// (package clustertest: 3 nodes, an embedded etcd or the lab's, the etcd
// or the PostgreSQL store), and a lab transfer is a transfer saga
// submitted with ledger.SubmitAndWait.
//
// With the in-memory store ("memory", package persistence/memory) the
// approach keeps nothing durable: it is no alternative to a lock, but
// the cost of the runtime alone (transport, entities, sagas, batching),
// an upper bound for the durable stores, which add their own work on top
// of it.
//
// # Pauses
//
// The lab simulates a process pause that outlasts a lock's TTL, between a
// transfer's locks and its writes. Ordo has no client-side lock; its
// equivalent of "the process holding the lock stops" is the node owning the
// data stopping while it has work in flight. So when the lab attaches a
// pause to a transfer, the approach submits the transfer (the saga has
// started and will debit the source), calls lab.Pausing, and pauses the node
// that owns the source account through its fault seam
// (clustertest.Faults.Pause) for the requested time: its lease
// keepalives stop and its entities freeze with the debit
// and credit steps queued or in flight. With a pause longer than the lease
// TTL, another node takes the shard over, fences the store and carries on;
// when the paused node resumes, whatever it writes under its old epoch is
// refused by the store. Then the client waits for the saga's final status.
// Only one pause per node runs at a time; a transfer whose node is already
// paused pauses its own client instead (it sleeps).
//
// The lease TTL is the lab's --ttl rounded up to whole seconds (etcd
// leases count seconds), at least 1s.
package ordolab

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sync/errgroup"

	"github.com/ordo-actors/ordo/actors"
	"github.com/ordo-actors/ordo/cluster/clustertest"
	"github.com/ordo-actors/ordo/examples/bank/ledger"
	"github.com/ordo-actors/ordo/lab"
	"github.com/ordo-actors/ordo/proto/bankpb"
	"github.com/ordo-actors/ordo/robustness/history"
	"github.com/ordo-actors/ordo/robustness/workload"
)

// Nodes is the size of the approach's cluster.
const Nodes = 3

// Builder returns the lab builder of the ordo approach named name with the
// given store ("etcd", "postgres" or "memory"; postgres uses the lab's
// --pg).
func Builder(name, store string) lab.Builder {
	return lab.Builder{Name: name, New: func(ctx context.Context, s lab.Settings) (lab.Approach, error) {
		if store == "postgres" && s.PG == "" {
			return nil, errors.New("needs --pg (or ORDO_PG_URL)")
		}
		ttl := max(time.Second, (s.TTL+time.Second-1)/time.Second*time.Second)
		return &Approach{name: name, cfg: clustertest.Config{Nodes: Nodes,
			Kinds: []actors.Kind{ledger.Account, ledger.Transfer}, EtcdEndpoints: s.Etcd, StoreKind: store, PG: s.PG, LeaseTTL: ttl}, workers: max(8, s.Concurrency)}, nil
	}}
}

// Approach is the ordo lab approach. Transfer is safe for concurrent use;
// Setup, Balances and Close follow lab.Approach's contract.
type Approach struct {
	name    string
	cfg     clustertest.Config
	workers int

	cl       *clustertest.Cluster
	accounts int
	nonce    string
	seq      atomic.Int64
	pausing  [Nodes]atomic.Bool
	pauses   atomic.Int64
	// unsettled holds the transfers whose client gave up (ID → transfer):
	// their sagas go on, and Balances waits for them to end.
	unsettled sync.Map
}

type transfer struct {
	from, to string
	amount   int64
}

var (
	_ lab.Approach    = (*Approach)(nil)
	_ lab.WALReader   = (*Approach)(nil)
	_ lab.WorkCounter = (*Approach)(nil)
)

// Name implements lab.Approach.
func (a *Approach) Name() string { return a.name }

// Setup starts a fresh cluster (a new etcd prefix, so a new store) and opens
// the accounts.
func (a *Approach) Setup(ctx context.Context, accounts int, initial int64) error {
	if a.cl != nil {
		if err := a.cl.Close(ctx); err != nil {
			return err
		}
		a.cl = nil
	}
	cl, err := clustertest.Start(ctx, a.cfg)
	if err != nil {
		return err
	}
	a.cl = cl
	// Shards still move after Start (a node that started first took free
	// shards before it knew its peers): wait until each is with its
	// desired owner, so that no handoff (entities passivated, accounts
	// read again on their new owner) falls in the measured run.
	if err := cl.WaitConverged(ctx); err != nil {
		return fmt.Errorf("ordo: waiting for shards to reach their owners: %w", err)
	}
	a.unsettled.Clear()
	a.accounts = accounts
	a.nonce = fmt.Sprintf("%x", time.Now().UnixNano())
	if _, err := workload.Open(ctx, cl.Client(), accounts, initial, a.workers); err != nil {
		return fmt.Errorf("ordo: opening accounts: %w", err)
	}
	return nil
}

// Transfer implements lab.Approach.
func (a *Approach) Transfer(ctx context.Context, from, to int, amount int64) error {
	id := fmt.Sprintf("lab-%s-%d", a.nonce, a.seq.Add(1))
	src, dst := history.AccountName(from), history.AccountName(to)
	inv := a.cl.Client()
	var st *bankpb.TransferState
	var err error
	if d := lab.Pausing(ctx); d > 0 {
		// Freeze the node owning the source while the transfer is under
		// way: the submit waits for the saga's outcome meanwhile.
		paused := make(chan struct{})
		go func() {
			defer close(paused)
			a.pause(src, d)
		}()
		st, err = ledger.SubmitNew(ctx, inv, id, src, dst, amount)
		<-paused
	} else {
		st, err = ledger.SubmitNew(ctx, inv, id, src, dst, amount)
	}
	if err != nil {
		if code, ok := workload.HandlerCode(err); ok {
			return fmt.Errorf("%w: %s", lab.ErrAborted, code)
		}
		a.unsettled.Store(id, transfer{src, dst, amount}) // the saga goes on: Balances waits for it
		return err                                        // outcome unknown
	}
	switch st.Status {
	case bankpb.TransferStatus_TRANSFER_STATUS_COMPLETED:
		return nil
	case bankpb.TransferStatus_TRANSFER_STATUS_REJECTED:
		if st.Error == ledger.CodeInsufficientFunds {
			return lab.ErrInsufficientFunds
		}
		return fmt.Errorf("%w: rejected: %s", lab.ErrAborted, st.Error)
	case bankpb.TransferStatus_TRANSFER_STATUS_COMPENSATED:
		return fmt.Errorf("%w: compensated: %s", lab.ErrAborted, st.Error)
	}
	return fmt.Errorf("ordo: transfer %s ended %s", id, workload.StatusName(st.Status))
}

// pause freezes the node owning account for d, or, if that node is
// already paused (or unknown), sleeps for d as a paused client would.
func (a *Approach) pause(account string, d time.Duration) {
	i := a.cl.Owner(ledger.AccountRef(account))
	if i < 0 || i >= Nodes || !a.pausing[i].CompareAndSwap(false, true) {
		time.Sleep(d)
		return
	}
	defer a.pausing[i].Store(false)
	f := a.cl.Faults(i)
	a.pauses.Add(1)
	f.Pause()
	time.Sleep(d) // the pause itself: the node is frozen meanwhile
	f.Resume()
}

// Cluster returns the approach's cluster (nil before Setup).
func (a *Approach) Cluster() *clustertest.Cluster { return a.cl }

// Pauses returns how many node pauses the approach has made.
func (a *Approach) Pauses() int64 { return a.pauses.Load() }

// Unsettled returns how many transfers whose client gave up Balances has
// not yet seen settle.
func (a *Approach) Unsettled() int {
	n := 0
	a.unsettled.Range(func(any, any) bool { n++; return true })
	return n
}

// Balances implements lab.Approach. It first waits (within ctx) for the
// sagas of transfers whose client gave up, so that the balances it reads
// are not caught between a debit and its credit: up to a.workers at once.
func (a *Approach) Balances(ctx context.Context) ([]int64, error) {
	var (
		mu   sync.Mutex
		errs []error
	)
	var g errgroup.Group
	g.SetLimit(a.workers)
	a.unsettled.Range(func(k, v any) bool {
		id, t := k.(string), v.(transfer)
		g.Go(func() error {
			// Submitting again waits for the saga's outcome; it never
			// applies the transfer twice.
			if _, err := ledger.SubmitAndWait(ctx, a.cl.Client(), id, t.from, t.to, t.amount); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
				return nil
			}
			a.unsettled.Delete(id)
			return nil
		})
		return ctx.Err() == nil
	})
	_ = g.Wait() // every error is in errs
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("ordo: waiting for unfinished transfers: %w", err)
	}
	m, err := workload.Balances(ctx, a.cl.Client(), a.accounts, a.workers)
	if err != nil {
		return nil, err
	}
	out := make([]int64, a.accounts)
	for i := range out {
		out[i] = m[history.AccountName(i)]
	}
	return out, nil
}

// WALPosition implements lab.WALReader: the PostgreSQL server's WAL
// position when the approach keeps its data there.
func (a *Approach) WALPosition(ctx context.Context) (uint64, bool, error) {
	if a.cfg.StoreKind != "postgres" {
		return 0, false, nil
	}
	conn, err := pgx.Connect(ctx, a.cfg.PG)
	if err != nil {
		return 0, true, fmt.Errorf("ordo: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	pos, err := lab.PGWALPosition(ctx, conn)
	return pos, true, err
}

// Checkpoint implements lab.WALReader.
func (a *Approach) Checkpoint(ctx context.Context) error {
	if a.cfg.StoreKind != "postgres" {
		return nil
	}
	conn, err := pgx.Connect(ctx, a.cfg.PG)
	if err != nil {
		return fmt.Errorf("ordo: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "CHECKPOINT"); err != nil {
		return fmt.Errorf("ordo: %w", err)
	}
	return nil
}

// WorkCounts implements lab.WorkCounter: over the cluster's nodes, the
// store Saves their write batchers made, the records those carried, the
// entity writes they coalesced into them, the store reads of activating
// entities and the activations; and, over the nodes and
// the lab's client, the calls and frames of calls and results their
// transports sent to another process (in-process here, over loopback
// TLS as between machines; co-located messages never are).
func (a *Approach) WorkCounts() []lab.Count {
	var saves, records, writes, loads, activations, calls, frames uint64
	for _, n := range a.cl.Nodes() {
		st := n.Status()
		loads += st.Host.Loads
		activations += st.Host.Activations
		saves += st.Host.Batch.Saves
		records += st.Host.Batch.Records
		writes += st.Host.Batch.Writes
		calls += st.Transport.Calls
		frames += st.Transport.CallFrames + st.Transport.ResultFrames
	}
	cs := a.cl.Client().TransportStats()
	calls += cs.Calls
	frames += cs.CallFrames
	return []lab.Count{{Name: "store saves", N: saves}, {Name: "records saved", N: records}, {Name: "entity writes", N: writes},
		{Name: "store reads", N: loads}, {Name: "activations", N: activations}, {Name: "network calls", N: calls}, {Name: "network frames", N: frames}}
}

// Close stops the cluster.
func (a *Approach) Close() error {
	if a.cl == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := a.cl.Close(ctx)
	a.cl = nil
	return err
}
