package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ordo-actors/ordo/persistence"
)

// ErrOutcomeUnknown is wrapped, per shard, by Save outcomes of transactions
// that failed in transport (connection loss, timeout, canceled context):
// the shard's records may or may not be durable, but never partly, and
// may still become durable after Save returns: write the shard again only
// under a new epoch.
var ErrOutcomeUnknown = errors.New("etcdstore: save outcome unknown")

// Defaults of Config.
const (
	// DefaultPrefix is the default Config.Prefix.
	DefaultPrefix = "/ordo/default/store/"
	// DefaultMaxTxnOps is etcd's default --max-txn-ops.
	DefaultMaxTxnOps = 128
	// DefaultMaxRequestBytes is etcd's default --max-request-bytes.
	DefaultMaxRequestBytes = 1536 * 1024
	// DefaultRequestTimeout is the default Config.RequestTimeout.
	DefaultRequestTimeout = 2 * time.Second
)

// Size accounting. etcd measures a transaction by its encoded size; the
// store estimates it from key and value lengths plus a fixed cost per
// operation and per transaction, both generous.
const (
	opOverhead  = 32
	txnOverhead = 4096
)

// Config configures a Store. The zero value of a field means its default.
// A Config is a plain value: New copies it.
type Config struct {
	// Prefix is the key prefix of every key the store writes; it should end
	// in "/". Default DefaultPrefix.
	Prefix string
	// MaxTxnOps is the most operations one transaction may hold: set it to
	// the server's --max-txn-ops. Default 128, etcd's own default.
	MaxTxnOps int
	// MaxRequestBytes is the largest transaction the store sends, in bytes:
	// set it to at most the server's --max-request-bytes. Default 1.5 MiB,
	// etcd's own default. A record needs about its data size plus its key
	// size plus a few hundred bytes.
	MaxRequestBytes int
	// RequestTimeout bounds each etcd request the store makes, below the
	// caller's ctx. etcd never answers a write a follower forwarded to a
	// leader that just died: the request waits for the server's own
	// timeout (5s plus two election timeouts), and a Save that waits
	// holds up every call of its shards. Past this bound the Save reports
	// ErrOutcomeUnknown, and the shard is taken again under a new epoch,
	// which fences the lost write should it ever apply. Default
	// DefaultRequestTimeout.
	RequestTimeout time.Duration
}

// DefaultConfig returns the defaults, suitable for an etcd with default
// limits.
func DefaultConfig() Config {
	return Config{Prefix: DefaultPrefix, MaxTxnOps: DefaultMaxTxnOps, MaxRequestBytes: DefaultMaxRequestBytes,
		RequestTimeout: DefaultRequestTimeout}
}

// Validate reports the first invalid setting; the error wraps
// persistence.ErrInvalidConfig.
func (c Config) Validate() error {
	if err := c.validate(); err != nil {
		return persistence.InvalidConfig(err)
	}
	return nil
}

// Validate reports whether c, with defaults applied, is usable.
func (c Config) validate() error {
	c = c.withDefaults()
	switch {
	case c.MaxTxnOps < 2:
		return fmt.Errorf("etcdstore: MaxTxnOps %d is below 2", c.MaxTxnOps)
	case c.MaxRequestBytes < 2*txnOverhead:
		return fmt.Errorf("etcdstore: MaxRequestBytes %d is below %d", c.MaxRequestBytes, 2*txnOverhead)
	case c.RequestTimeout < 0:
		return fmt.Errorf("etcdstore: RequestTimeout %v is negative", c.RequestTimeout)
	case strings.ContainsRune(c.Prefix, 0):
		return errors.New("etcdstore: Prefix contains a NUL byte")
	}
	return nil
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.Prefix == "" {
		c.Prefix = d.Prefix
	}
	if c.MaxTxnOps == 0 {
		c.MaxTxnOps = d.MaxTxnOps
	}
	if c.MaxRequestBytes == 0 {
		c.MaxRequestBytes = d.MaxRequestBytes
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = d.RequestTimeout
	}
	return c
}

// lateOutcomeWait bounds how long a transaction whose Save already
// reported ErrOutcomeUnknown is left running to learn its real outcome.
const lateOutcomeWait = 30 * time.Second

// Store is a persistence.Store over an etcd client. It is safe for
// concurrent use by multiple goroutines.
type Store struct {
	cli    *clientv3.Client
	cfg    Config
	closed atomic.Bool

	lateFenced atomic.Uint64
	lateMu     sync.Mutex
	late       map[*lateTxn]struct{} // transactions left running after an unknown outcome
	lateClosed bool                  // Close began: no more are left running
	lateWG     sync.WaitGroup
}

// lateTxn is a transaction whose Save no longer waits for it.
type lateTxn struct{ cancel context.CancelFunc }

var _ persistence.Journal = (*Store)(nil)

// New returns a Store over cli, which the caller owns and must keep open
// until the Store is closed. New does no I/O.
func New(cli *clientv3.Client, cfg Config) (*Store, error) {
	if cli == nil {
		return nil, errors.New("etcdstore: nil client")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Store{cli: cli, cfg: cfg.withDefaults(), late: map[*lateTxn]struct{}{}}, nil
}

// Fence implements persistence.Store: a compare-and-swap that only raises
// the fence, retried while concurrent Fence calls change it.
func (s *Store) Fence(ctx context.Context, shard uint32, epoch int64) error {
	if err := persistence.ValidateEpoch(epoch); err != nil {
		return err
	}
	if s.closed.Load() {
		return persistence.ErrClosed
	}
	key := fenceKey(s.cfg.Prefix, shard)
	rctx, cancel := s.request(ctx)
	resp, err := s.cli.Get(rctx, key)
	cancel()
	if err != nil {
		return fmt.Errorf("etcdstore: fence shard %d: %w", shard, err)
	}
	kvs := resp.Kvs
	for {
		var have, rev int64
		if len(kvs) > 0 {
			if have, err = parseFence(kvs[0].Value); err != nil {
				return fmt.Errorf("etcdstore: fence shard %d: %w", shard, err)
			}
			rev = kvs[0].ModRevision
		}
		switch {
		case have > epoch:
			return &persistence.FencedError{Shard: shard, Have: epoch, Want: have}
		case have == epoch:
			return nil
		}
		rctx, cancel := s.request(ctx)
		tr, err := s.cli.Txn(rctx).
			If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).
			Then(clientv3.OpPut(key, formatFence(epoch))).
			Else(clientv3.OpGet(key)).
			Commit()
		cancel()
		if err != nil {
			return fmt.Errorf("etcdstore: fence shard %d: %w", shard, err)
		}
		if tr.Succeeded {
			return nil
		}
		kvs = tr.Responses[0].GetResponseRange().Kvs
	}
}

// Load implements persistence.Store. It is a linearizable read.
func (s *Store) Load(ctx context.Context, kind, id string) (persistence.Record, error) {
	if err := persistence.ValidateKey(kind, id); err != nil {
		return persistence.Record{}, err
	}
	if s.closed.Load() {
		return persistence.Record{}, persistence.ErrClosed
	}
	rctx, cancel := s.request(ctx)
	resp, err := s.cli.Get(rctx, entityKey(s.cfg.Prefix, kind, id))
	cancel()
	if err != nil {
		return persistence.Record{}, fmt.Errorf("etcdstore: load %s/%s: %w", kind, id, err)
	}
	if len(resp.Kvs) == 0 {
		return persistence.Record{}, fmt.Errorf("%w: %s/%s", persistence.ErrNotFound, kind, id)
	}
	shard, epoch, due, data, err := decodeRecord(resp.Kvs[0].Value)
	if err != nil {
		return persistence.Record{}, fmt.Errorf("etcdstore: load %s/%s: %w", kind, id, err)
	}
	if data == nil {
		data = []byte{}
	}
	return persistence.Record{Kind: kind, ID: id, Shard: shard, Epoch: epoch, Data: data, Due: due}, nil
}

// group is one shard's records in a batch, encoded as the operations of
// its part of a transaction.
type group struct {
	shard uint32
	epoch int64
	fence string // fence key
	nrecs int
	ops   []clientv3.Op  // Then: the records' and events' puts, the deletes
	cmps  []clientv3.Cmp // If, besides the fence: where the journals end
	heads []head         // Else, besides the fence: the journals appended to
	news  []created      // Else, after the heads: the records written as new
	guard int            // estimated bytes of the group's If and Else parts
	size  int            // estimated bytes in a transaction, guard included

	tooBig    int     // estimated bytes of the group's largest put
	tooBigKey putWhat // and what it writes
}

// putWhat names what a put writes, for the error of a put too large for
// any transaction; it is formatted only then.
type putWhat struct {
	what     string // "record", "event" or "reminder index entry"
	kind, id string
	seq      uint64 // of an event
}

func (w putWhat) String() string {
	if w.what == "event" {
		return fmt.Sprintf("event %d of %s/%s", w.seq, w.kind, w.id)
	}
	return w.what + " " + w.kind + "/" + w.id
}

// created is a record a group writes as new (Record.Create), checked by
// the group's guard.
type created struct {
	kind, id, key string
}

// head is a journal a group appends to, checked by the group's guard.
type head struct {
	kind, id string
	first    uint64 // Seq of the first event appended
}

// Save implements persistence.Store; see the package documentation for how
// a batch maps to transactions.
func (s *Store) Save(ctx context.Context, recs []persistence.Record) (map[uint32]error, error) {
	if err := persistence.ValidateBatch(recs); err != nil {
		return nil, err
	}
	if s.closed.Load() {
		return nil, persistence.ErrClosed
	}
	outcome := make(map[uint32]error)
	lasts := s.readHeads(ctx, recs, outcome)
	txns := s.plan(recs, lasts, outcome)
	if len(txns) == 1 {
		s.commit(ctx, txns[0], outcome)
		return outcome, nil
	}
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	for _, groups := range txns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out := make(map[uint32]error, len(groups))
			s.commit(ctx, groups, out)
			mu.Lock()
			for sh, err := range out {
				outcome[sh] = err
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	return outcome, nil
}

// readHeads reads where the journals end of the records that delete events
// without appending any, which the transaction must know to keep each
// journal's last event. A failed read fails its shard (nothing of it is
// written). Deleting below a journal's end read earlier is safe at any
// later time: a journal's end only moves up, and is never deleted.
func (s *Store) readHeads(ctx context.Context, recs []persistence.Record, outcome map[uint32]error) map[int]uint64 {
	var lasts map[int]uint64
	for i := range recs {
		r := &recs[i]
		if r.DeleteEventsBefore == 0 || len(r.Events) > 0 || outcome[r.Shard] != nil {
			continue
		}
		last, err := s.lastSeq(ctx, r.Kind, r.ID)
		if err != nil {
			outcome[r.Shard] = fmt.Errorf("etcdstore: shard %d: read the journal of %s/%s: %w", r.Shard, r.Kind, r.ID, err)
			continue
		}
		if lasts == nil {
			lasts = make(map[int]uint64)
		}
		lasts[i] = last
	}
	return lasts
}

// plan groups recs by shard and packs the groups into transactions within
// the configured limits. Groups that cannot fit even alone get an
// ErrTooLarge outcome and are left out, as are groups that already have an
// outcome. lasts holds where the journals end for records that delete
// without appending (readHeads).
func (s *Store) plan(recs []persistence.Record, lasts map[int]uint64, outcome map[uint32]error) [][]*group {
	byShard := make(map[uint32]*group)
	var order []*group
	for i := range recs {
		r := &recs[i]
		g := byShard[r.Shard]
		if g == nil {
			g = &group{shard: r.Shard, epoch: r.Epoch, fence: fenceKey(s.cfg.Prefix, r.Shard)}
			// The guard compares the fence with the epoch; the Else branch reads it.
			g.guard = 2*(len(g.fence)+opOverhead) + len(formatFence(r.Epoch))
			g.size = g.guard
			byShard[r.Shard] = g
			order = append(order, g)
		}
		g.nrecs++
		key := entityKey(s.cfg.Prefix, r.Kind, r.ID)
		if r.Create {
			// Written only if the record does not exist; read back, for
			// the outcome, should the guard fail.
			g.cmps = append(g.cmps, clientv3.Compare(clientv3.CreateRevision(key), "=", 0))
			g.news = append(g.news, created{kind: r.Kind, id: r.ID, key: key})
			g.addGuard(2 * (len(key) + opOverhead))
		}
		g.put(key, encodeRecord(r), putWhat{what: "record", kind: r.Kind, id: r.ID})
		s.planJournal(g, r, lasts[i])
		s.planDue(g, r)
	}
	limit := s.cfg.MaxRequestBytes - txnOverhead
	var (
		txns                   [][]*group
		cur                    []*group
		ops, ifs, elses, bytes int
	)
	for _, g := range order {
		if outcome[g.shard] != nil {
			continue
		}
		if g.tooBig+g.guard > limit {
			outcome[g.shard] = fmt.Errorf("%w: shard %d: %s needs about %d bytes, more than one etcd transaction may carry (MaxRequestBytes %d)",
				persistence.ErrTooLarge, g.shard, g.tooBigKey, g.tooBig, s.cfg.MaxRequestBytes)
			continue
		}
		gIfs, gElses := 1+len(g.cmps), 1+len(g.heads)+len(g.news)
		if len(g.ops) > s.cfg.MaxTxnOps || gIfs > s.cfg.MaxTxnOps || gElses > s.cfg.MaxTxnOps || g.size > limit {
			outcome[g.shard] = fmt.Errorf("%w: shard %d: %d records, %d writes, %d comparisons, about %d bytes, do not fit in one etcd transaction (MaxTxnOps %d, MaxRequestBytes %d)",
				persistence.ErrTooLarge, g.shard, g.nrecs, len(g.ops), gIfs, g.size+txnOverhead, s.cfg.MaxTxnOps, s.cfg.MaxRequestBytes)
			continue
		}
		// Then holds the writes; If holds the comparisons and Else the
		// reads, each at most MaxTxnOps.
		if len(cur) > 0 && (ops+len(g.ops) > s.cfg.MaxTxnOps || ifs+gIfs > s.cfg.MaxTxnOps ||
			elses+gElses > s.cfg.MaxTxnOps || bytes+g.size > limit) {
			txns = append(txns, cur)
			cur, ops, ifs, elses, bytes = nil, 0, 0, 0, 0
		}
		cur = append(cur, g)
		ops += len(g.ops)
		ifs += gIfs
		elses += gElses
		bytes += g.size
	}
	if len(cur) > 0 {
		txns = append(txns, cur)
	}
	return txns
}

// put adds a put of key to the group's writes; what names it in errors.
func (g *group) put(key, val string, what putWhat) {
	n := len(key) + len(val) + opOverhead
	if n > g.tooBig {
		g.tooBig, g.tooBigKey = n, what
	}
	g.ops = append(g.ops, clientv3.OpPut(key, val))
	g.size += n
}

// planJournal adds r's journal changes to g: its events' puts guarded by
// comparisons that hold only where the journal ends just before the first
// of them, and the delete of the events r asks to delete. last is where
// the journal ends when r deletes without appending.
func (s *Store) planJournal(g *group, r *persistence.Record, last uint64) {
	if len(r.Events) == 0 && r.DeleteEventsBefore == 0 {
		return
	}
	ep := journalEntityPrefix(s.cfg.Prefix, r.Kind, r.ID)
	end := clientv3.GetPrefixRangeEnd(ep)
	below := persistence.DeleteBound(r, last) // events below it are deleted
	if len(r.Events) > 0 {
		first := r.Events[0].Seq
		// The journal ends at first-1: that event exists (unless first is
		// 1) and none from first on does. Journals are contiguous, and
		// never lose their last event, so this is exact.
		if first == 1 {
			g.cmps = append(g.cmps, clientv3.Compare(clientv3.CreateRevision(ep), "=", 0).WithRange(end))
			g.addGuard(len(ep) + len(end) + opOverhead)
		} else {
			prev, from := eventKey(s.cfg.Prefix, r.Kind, r.ID, first-1), eventKey(s.cfg.Prefix, r.Kind, r.ID, first)
			g.cmps = append(g.cmps,
				clientv3.Compare(clientv3.CreateRevision(prev), ">", 0),
				clientv3.Compare(clientv3.CreateRevision(from), "=", 0).WithRange(end))
			g.addGuard(len(prev) + len(from) + len(end) + 2*opOverhead)
		}
		// Where the journal ends, for the outcome should the guard fail.
		g.heads = append(g.heads, head{kind: r.Kind, id: r.ID, first: first})
		g.addGuard(len(ep) + len(end) + opOverhead)
		for _, e := range r.Events {
			if e.Seq >= below { // events below are deleted as they are appended
				g.put(eventKey(s.cfg.Prefix, r.Kind, r.ID, e.Seq), encodeEvent(e.Data), putWhat{what: "event", kind: r.Kind, id: r.ID, seq: e.Seq})
			}
		}
		// Stored events are all below first; new ones are not deleted by
		// the range (etcd refuses a put inside a deleted range).
		below = min(below, first)
	}
	if below > 1 {
		del := clientv3.OpDelete(ep, clientv3.WithRange(eventKey(s.cfg.Prefix, r.Kind, r.ID, below)))
		g.ops = append(g.ops, del)
		g.size += 2*len(ep) + opOverhead
	}
}

// addGuard counts n bytes of comparisons or reads in the group's guard.
func (g *group) addGuard(n int) {
	g.guard += n
	g.size += n
}

// commit writes groups in one transaction guarded by their fences, dropping
// fenced groups and retrying until the rest is written or the transaction
// fails in transport. It records each group's outcome in out.
func (s *Store) commit(ctx context.Context, groups []*group, out map[uint32]error) {
	for len(groups) > 0 {
		nc, ng, np := 0, 0, 0
		for _, g := range groups {
			nc += 1 + len(g.cmps)
			ng += 1 + len(g.heads) + len(g.news)
			np += len(g.ops)
		}
		cmps := make([]clientv3.Cmp, 0, nc)
		gets := make([]clientv3.Op, 0, ng)
		puts := make([]clientv3.Op, 0, np)
		for _, g := range groups {
			cmps = append(cmps, clientv3.Compare(clientv3.Value(g.fence), "=", formatFence(g.epoch)))
			cmps = append(cmps, g.cmps...)
			gets = append(gets, clientv3.OpGet(g.fence))
			for _, h := range g.heads {
				gets = append(gets, s.journalEndOp(h.kind, h.id))
			}
			for _, c := range g.news {
				gets = append(gets, clientv3.OpGet(c.key, clientv3.WithCountOnly()))
			}
			puts = append(puts, g.ops...)
		}
		resp, err := s.txn(ctx, groups, cmps, puts, gets)
		if err != nil {
			err = txnError(err)
			if len(groups) > 1 && errors.Is(err, persistence.ErrTooLarge) {
				// The server refused the transaction as a whole, before
				// applying it (its limits are below the configured ones):
				// each half may fit, so that only a shard too large alone
				// gets ErrTooLarge.
				s.commit(ctx, groups[:len(groups)/2], out)
				s.commit(ctx, groups[len(groups)/2:], out)
				return
			}
			for _, g := range groups {
				out[g.shard] = fmt.Errorf("etcdstore: shard %d: %w", g.shard, err)
			}
			return
		}
		if resp.Succeeded {
			for _, g := range groups {
				out[g.shard] = nil
			}
			return
		}
		keep := groups[:0]
		at := 0
		for _, g := range groups {
			reads := resp.Responses[at : at+1+len(g.heads)+len(g.news)]
			at += len(reads)
			if err := s.refused(g, reads); err != nil {
				out[g.shard] = err
				continue
			}
			keep = append(keep, g)
		}
		if len(keep) == len(groups) {
			// The guard failed although every fence and journal read back
			// matches: impossible within one transaction; do not loop on it.
			for _, g := range groups {
				out[g.shard] = fmt.Errorf("etcdstore: shard %d: transaction guard failed with matching fences and journals", g.shard)
			}
			return
		}
		groups = keep
	}
}

// refused tells from the Else reads of a failed transaction (g's fence,
// then the ends of g's journals, then its records written as new) why g's
// part of the guard failed: a *FencedError, a *SequenceError, an
// *ExistsError, another error when a read cannot be decoded, or nil when
// it held.
func (s *Store) refused(g *group, reads []*etcdserverpb.ResponseOp) error {
	var have int64
	if kvs := reads[0].GetResponseRange().Kvs; len(kvs) > 0 {
		var err error
		if have, err = parseFence(kvs[0].Value); err != nil {
			return fmt.Errorf("etcdstore: shard %d: %w", g.shard, err)
		}
	}
	if have != g.epoch {
		return &persistence.FencedError{Shard: g.shard, Have: g.epoch, Want: have}
	}
	for i, h := range g.heads {
		last, err := s.journalEnd(h.kind, reads[1+i].GetResponseRange())
		if err != nil {
			return fmt.Errorf("etcdstore: shard %d: %s/%s: %w", g.shard, h.kind, h.id, err)
		}
		if last+1 != h.first {
			return &persistence.SequenceError{Shard: g.shard, Kind: h.kind, ID: h.id, First: h.first, Last: last}
		}
	}
	for i, c := range g.news {
		if reads[1+len(g.heads)+i].GetResponseRange().Count > 0 {
			return &persistence.ExistsError{Shard: g.shard, Kind: c.kind, ID: c.id}
		}
	}
	return nil
}

// txn runs one transaction guarded by the fences of groups. It returns
// when etcd answers, or when Config.RequestTimeout passes or ctx ends,
// whichever comes first; in the last two cases the outcome is unknown and
// the transaction is left running, for up to lateOutcomeWait or until
// Close, so that if etcd rejects it by fencing after all, LateFenced
// counts its records. (A process stopped longer than RequestTimeout, as in
// a GC pause, finds every write it had on the wire timed out when it
// resumes, though etcd may answer them a moment later.)
func (s *Store) txn(ctx context.Context, groups []*group, cmps []clientv3.Cmp, puts, gets []clientv3.Op) (*clientv3.TxnResponse, error) {
	// A context already done starts nothing: the transaction below runs
	// detached from ctx, and the select could pick its answer over ctx.
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), lateOutcomeWait)
	type result struct {
		resp *clientv3.TxnResponse
		err  error
	}
	done := make(chan result, 1)
	go func() {
		resp, err := s.cli.Txn(tctx).If(cmps...).Then(puts...).Else(gets...).Commit()
		done <- result{resp, err}
	}()
	timer := time.NewTimer(s.cfg.RequestTimeout)
	defer timer.Stop()
	var err error
	select {
	case r := <-done:
		cancel()
		return r.resp, r.err
	case <-timer.C:
		err = fmt.Errorf("no answer within %v: %w", s.cfg.RequestTimeout, context.DeadlineExceeded)
	case <-ctx.Done():
		err = ctx.Err()
	}
	lt := &lateTxn{cancel: cancel}
	s.lateMu.Lock()
	if s.lateClosed {
		s.lateMu.Unlock()
		cancel()
		<-done
		return nil, err
	}
	s.late[lt] = struct{}{}
	s.lateWG.Add(1)
	s.lateMu.Unlock()
	go func() {
		defer s.lateWG.Done()
		r := <-done
		cancel()
		s.lateMu.Lock()
		delete(s.late, lt)
		s.lateMu.Unlock()
		if r.err == nil && !r.resp.Succeeded {
			s.lateFenced.Add(uint64(fencedRecords(groups, r.resp)))
		}
	}()
	return nil, err
}

// fencedRecords counts the records of the groups a failed transaction's
// Else branch shows fenced by another epoch.
func fencedRecords(groups []*group, resp *clientv3.TxnResponse) int {
	n, at := 0, 0
	for _, g := range groups {
		var have int64
		if kvs := resp.Responses[at].GetResponseRange().Kvs; len(kvs) > 0 {
			have, _ = parseFence(kvs[0].Value)
		}
		at += 1 + len(g.heads)
		if have != g.epoch {
			n += g.nrecs
		}
	}
	return n
}

// LateFenced returns how many records etcd rejected by fencing after the
// Save that carried them had already reported ErrOutcomeUnknown (it stopped
// waiting: RequestTimeout passed or its ctx ended). Their writer had given
// them up; the store still saw the stale write and refused it.
func (s *Store) LateFenced() uint64 { return s.lateFenced.Load() }

// txnError classifies a failed transaction. Limits the server enforces
// below the configured ones refuse the transaction before it is applied;
// anything else leaves the outcome unknown.
func txnError(err error) error {
	if errors.Is(err, rpctypes.ErrTooManyOps) || errors.Is(err, rpctypes.ErrRequestTooLarge) ||
		errors.Is(err, rpctypes.ErrGRPCTooManyOps) || errors.Is(err, rpctypes.ErrGRPCRequestTooLarge) {
		return fmt.Errorf("%w: the server refused the transaction (%w); lower Config.MaxTxnOps or Config.MaxRequestBytes", persistence.ErrTooLarge, err)
	}
	return fmt.Errorf("%w: %w", ErrOutcomeUnknown, err)
}

// request bounds one etcd request by Config.RequestTimeout within ctx.
func (s *Store) request(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.cfg.RequestTimeout)
}

// Close implements persistence.Store. It does not close the client. Calls
// in flight when Close is called finish normally; transactions left
// running after an unknown outcome are abandoned, and Close waits for
// them to end.
func (s *Store) Close() error {
	s.closed.Store(true)
	s.lateMu.Lock()
	s.lateClosed = true
	for lt := range s.late {
		lt.cancel()
	}
	s.lateMu.Unlock()
	s.lateWG.Wait()
	return nil
}
