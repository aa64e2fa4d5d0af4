package actors

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/ordo-actors/ordo/persistence"
	"google.golang.org/protobuf/proto"
)

// Projections. A projection follows the journal of an event-sourced kind
// (or of one of its entities) and hands its events, decoded, to a handler
// that builds a read model: a table, a search index, a statement. Follow
// reads the journal in pages (persistence.Journal.ReadJournal, or
// ReadEvents for one entity), calls the handler with each page, then
// stores the position after it (OffsetStore): a projection stopped at any
// point, in any process, resumes from its stored position, and never
// misses an event, but may see again the page it was handling when it
// stopped (at-least-once). A read model that must see each event once
// either ignores what it has seen (each entity's events come in Seq order,
// so remembering the last Seq per entity is enough) or keeps its offset
// itself, in the same transaction as its rows (an OffsetStore over the
// read model's own storage).
//
// Order: one entity's events come in Seq order; the events of one shard in
// the order their Saves committed; those of different shards interleave
// (see persistence.Journal.ReadJournal).

// EventKind is an event-sourced kind as a projection sees it: its name and
// the decoding of its stored events. A *KindOf[S] declared EventSourced is
// one.
type EventKind interface {
	Name() string
	// DecodeEvent decodes one stored event (see KindOf.DecodeEvent).
	DecodeEvent(data []byte) (proto.Message, error)
}

// JournalEvent is one event of a journal, as a projection's handler gets
// it.
type JournalEvent struct {
	// Ref is the entity that emitted the event.
	Ref Ref
	// Seq is the event's position in the entity's journal, from 1.
	Seq uint64
	// Event is the decoded event.
	Event proto.Message
}

// OffsetStore keeps the positions of projections by name. Implementations
// are safe for concurrent use.
type OffsetStore interface {
	// LoadOffset returns the stored position of projection name, the zero
	// Offset (the journal's start) when none is stored.
	LoadOffset(ctx context.Context, name string) (persistence.Offset, error)
	// SaveOffset stores the position of projection name.
	SaveOffset(ctx context.Context, name string, off persistence.Offset) error
}

// MemoryOffsets is an OffsetStore in memory, for tests and for projections
// that rebuild their read model from the start in each process. The zero
// value is ready to use; it is safe for concurrent use.
type MemoryOffsets struct {
	mu   sync.Mutex
	offs map[string]persistence.Offset
}

// LoadOffset implements OffsetStore.
func (m *MemoryOffsets) LoadOffset(_ context.Context, name string) (persistence.Offset, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.offs[name], nil
}

// SaveOffset implements OffsetStore.
func (m *MemoryOffsets) SaveOffset(_ context.Context, name string, off persistence.Offset) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.offs == nil {
		m.offs = make(map[string]persistence.Offset)
	}
	m.offs[name] = off
	return nil
}

// FollowConfig configures Follow. Start from DefaultFollowConfig.
type FollowConfig struct {
	// Name names the projection: its position is stored under it in the
	// OffsetStore. Required.
	Name string
	// ID, when set, restricts the projection to the journal of the kind's
	// entity ID (read with ReadEvents; its position is the Seq of the last
	// event handled, in decimal). Empty: every entity of the kind, in
	// commit order (ReadJournal).
	ID string
	// Page is how many events one read returns at most, and one call of
	// the handler gets. Default 500.
	Page int
	// Poll is how long Follow waits, once it has read to the journal's
	// end, before reading again. Default 1s.
	Poll time.Duration
	// UntilCaughtUp makes Follow return nil once it has handled every
	// event the journal held when it read its end, instead of waiting for
	// more. Default false.
	UntilCaughtUp bool
}

// DefaultFollowConfig returns a FollowConfig with every default and no
// Name.
func DefaultFollowConfig() FollowConfig {
	return FollowConfig{Page: 500, Poll: time.Second}
}

// Validate reports the first invalid setting; the error wraps
// ErrInvalidConfig.
func (c FollowConfig) Validate() error {
	if err := c.validate(); err != nil {
		return invalidConfig(err)
	}
	return nil
}

// Validate reports the first invalid field.
func (c FollowConfig) validate() error {
	switch {
	case c.Name == "":
		return errors.New("actors: FollowConfig.Name is required")
	case c.Page <= 0:
		return errors.New("actors: FollowConfig.Page must be positive")
	case c.Poll <= 0:
		return errors.New("actors: FollowConfig.Poll must be positive")
	}
	return nil
}

// Follow follows the journal of kind in j from the position offsets holds
// for cfg.Name (the start when none): for each page of events it calls
// handle, with the events decoded, then stores the position after them.
// It runs until ctx ends (returning ctx's error), until it has caught up
// when cfg.UntilCaughtUp (returning nil), or until a read, a decoding, the
// handler or the offset store fails (returning that error, the page not
// stored as handled: calling Follow again resumes with it). Delivery is at
// least once: see the comment on projections above.
//
// handle runs on Follow's goroutine, one page at a time; the events are
// its to keep. An event of a type kind does not declare stops Follow with
// an error naming it.
func Follow(ctx context.Context, j persistence.Journal, kind EventKind, offsets OffsetStore, cfg FollowConfig,
	handle func(ctx context.Context, events []JournalEvent) error) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	if j == nil || kind == nil || offsets == nil || handle == nil {
		return errors.New("actors: Follow: nil journal, kind, offset store or handler")
	}
	off, err := offsets.LoadOffset(ctx, cfg.Name)
	if err != nil {
		return fmt.Errorf("actors: projection %q: loading its offset: %w", cfg.Name, err)
	}
	var t *time.Timer
	defer func() {
		if t != nil {
			t.Stop()
		}
	}()
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		evs, next, err := readPage(ctx, j, kind, cfg, off)
		if err != nil {
			return fmt.Errorf("actors: projection %q: %w", cfg.Name, err)
		}
		if len(evs) == 0 {
			if cfg.UntilCaughtUp {
				return nil
			}
			if t == nil {
				t = time.NewTimer(cfg.Poll)
			} else {
				t.Reset(cfg.Poll)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-t.C:
			}
			continue
		}
		if err := handle(ctx, evs); err != nil {
			return fmt.Errorf("actors: projection %q: handler: %w", cfg.Name, err)
		}
		if err := offsets.SaveOffset(ctx, cfg.Name, next); err != nil {
			return fmt.Errorf("actors: projection %q: storing its offset: %w", cfg.Name, err)
		}
		off = next
	}
}

// readPage reads the page of events after off and decodes it.
func readPage(ctx context.Context, j persistence.Journal, kind EventKind, cfg FollowConfig, off persistence.Offset) ([]JournalEvent, persistence.Offset, error) {
	name := kind.Name()
	var entries []persistence.JournalEntry
	next := off
	if cfg.ID != "" {
		var last uint64
		if off != "" {
			var err error
			if last, err = strconv.ParseUint(string(off), 10, 64); err != nil {
				return nil, off, fmt.Errorf("offset %q is not an event Seq of %s/%s", off, name, cfg.ID)
			}
		}
		evs, err := j.ReadEvents(ctx, name, cfg.ID, last+1, cfg.Page)
		if err != nil {
			return nil, off, err
		}
		entries = make([]persistence.JournalEntry, len(evs))
		for i, ev := range evs {
			entries[i] = persistence.JournalEntry{Kind: name, ID: cfg.ID, Event: ev}
		}
		if n := len(evs); n > 0 {
			next = persistence.Offset(strconv.FormatUint(evs[n-1].Seq, 10))
		}
	} else {
		var err error
		if entries, next, err = j.ReadJournal(ctx, name, off, cfg.Page); err != nil {
			return nil, off, err
		}
	}
	out := make([]JournalEvent, len(entries))
	for i, en := range entries {
		ev, err := kind.DecodeEvent(en.Data)
		if err != nil {
			return nil, off, fmt.Errorf("event %d of %s/%s: %w", en.Seq, en.Kind, en.ID, err)
		}
		out[i] = JournalEvent{Ref: Ref{Kind: en.Kind, ID: en.ID}, Seq: en.Seq, Event: ev}
	}
	return out, next, nil
}
