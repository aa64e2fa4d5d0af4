package persistence

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/ordo-actors/ordo/internal/configerr"
)

// Limits on what a Store accepts. Drivers may accept less (see their docs)
// but never more.
const (
	// MaxKindLen is the longest kind name, in bytes.
	MaxKindLen = 64
	// MaxIDLen is the longest entity ID, in bytes.
	MaxIDLen = 256
)

// Record is one entity's stored form. Data is opaque to the store (the
// runtime encodes state, sequence number and recent replies into it); Shard
// and Epoch are what fencing checks.
//
// Events and DeleteEventsBefore change the entity's journal in the same
// atomic step as Data (see Journal); only a Store that implements Journal
// honours them, so a caller must not set them on any other Store. Load
// never fills them.
type Record struct {
	Kind  string
	ID    string
	Shard uint32
	Epoch int64
	Data  []byte
	// Due is when the entity's earliest durable reminder is due, Unix
	// nanoseconds; 0: it has none. Save stores it with the record, in the
	// same atomic step, and a store that is a ReminderIndex indexes the
	// record under it. Load returns it as saved.
	Due int64
	// PrevDue is, in a Save, the Due of the record as last saved (0: none,
	// or never saved) as its writer knows it: a driver that cannot read
	// the old Due within its write (etcd) removes the record's index entry
	// at PrevDue. Other drivers ignore it; Load returns 0.
	PrevDue int64

	// Events are appended to the entity's journal. Their Seqs are
	// consecutive, and the first is the entity's last stored Seq + 1 (1
	// for an entity without events); otherwise the shard's group is
	// refused with a *SequenceError and nothing of it is written.
	Events []Event
	// DeleteEventsBefore, when non-zero, deletes the entity's events with
	// Seq below it, except the entity's last event (counting Events), which
	// is always kept so that sequence numbers continue. Events deleted
	// leave ReadEvents and ReadJournal too.
	DeleteEventsBefore uint64

	// Create makes the record's write a creation: the shard's group is
	// written only if no record of (Kind, ID) is stored yet; otherwise
	// nothing of the group is written and its outcome is an *ExistsError.
	// A writer that skipped reading an entity it believed new sets it on
	// the entity's first write, so that a wrong belief can never overwrite
	// what is stored.
	Create bool
}

// Store keeps entity records under per-shard fencing.
//
// Implementations are safe for concurrent use by multiple goroutines.
type Store interface {
	// Fence raises the stored fence of shard to epoch. It succeeds when the
	// fence is below or equal to epoch (raising it to epoch), and fails with
	// a *FencedError when a higher epoch is already recorded. The fence never
	// moves down. Epochs are positive.
	Fence(ctx context.Context, shard uint32, epoch int64) error

	// Load returns the record of (kind, id), or an error matching
	// ErrNotFound when the entity has never been saved. The returned Data
	// is never nil (a record saved with empty data loads as an empty,
	// non-nil slice) and belongs to the caller.
	Load(ctx context.Context, kind, id string) (Record, error)

	// Save writes recs. Records are grouped by shard, and each shard's group
	// is atomic: either every record of the group becomes visible or none
	// does. A group is written only if, in the same atomic step, the shard's
	// fence equals the group's epoch (every record of one shard in a batch
	// carries the same epoch).
	//
	// When err is nil, outcome has one entry for every shard in recs: nil
	// when the shard's records are durable; an error matching ErrFenced when
	// its fence differs (nothing of that shard was written); an error
	// matching ErrSequence (a *SequenceError) when the fence matches but a
	// record's Events do not follow the entity's journal (nothing of that
	// shard was written); an error matching ErrTooLarge when the shard's
	// records exceed a limit of the driver or its server, alone or together
	// (nothing of that shard was written; the same records would be refused
	// again); an error matching ErrExists (an *ExistsError) when a record
	// marked Create is already stored (nothing of that shard was written);
	// any other error when the outcome is unknown (the records may
	// or may not be durable). One shard's failure never affects another
	// shard's outcome.
	//
	// A non-nil err means the batch was refused as a whole before anything
	// was written: invalid records (ErrInvalid), or a closed store (ErrClosed).
	//
	// Save does not keep recs or their Data after it returns.
	Save(ctx context.Context, recs []Record) (outcome map[uint32]error, err error)

	// Close releases the store's resources. Calls after Close fail with
	// ErrClosed. Close is idempotent.
	Close() error
}

// Errors shared by every Store.
var (
	// ErrFenced matches every *FencedError.
	ErrFenced = errors.New("persistence: fenced")
	// ErrNotFound is returned by Load for an entity that was never saved.
	ErrNotFound = errors.New("persistence: not found")
	// ErrInvalid is wrapped by errors about malformed input.
	ErrInvalid = errors.New("persistence: invalid input")
	// ErrInvalidConfig is wrapped by every error of a store driver's
	// Config.Validate (and of the Open or New that validates it).
	ErrInvalidConfig = errors.New("persistence: invalid config")
	// ErrClosed is returned by calls on a closed Store.
	ErrClosed = errors.New("persistence: store closed")
	// ErrTooLarge is wrapped by errors about records over a driver's size
	// limit. As a Save outcome it means nothing of the shard was written.
	ErrTooLarge = errors.New("persistence: record too large")
	// ErrSequence matches every *SequenceError.
	ErrSequence = errors.New("persistence: event sequence mismatch")
	// ErrExists matches every *ExistsError.
	ErrExists = errors.New("persistence: record exists")
)

// ExistsError reports a record marked Create whose entity is already
// stored: nothing of its shard's group was written. It matches ErrExists
// with errors.Is.
type ExistsError struct {
	Shard uint32
	Kind  string
	ID    string
}

func (e *ExistsError) Error() string {
	return fmt.Sprintf("persistence: shard %d: %s/%s is already stored; it was written as new", e.Shard, e.Kind, e.ID)
}

// Is reports whether target is ErrExists.
func (e *ExistsError) Is(target error) bool { return target == ErrExists }

// FencedError reports a write or fence attempt under an epoch that is not
// the shard's current fence. It matches ErrFenced with errors.Is.
type FencedError struct {
	Shard uint32
	// Have is the epoch the rejected caller used.
	Have int64
	// Want is the fence recorded in the store (0 when the shard was never
	// fenced, or the store could not report it).
	Want int64
}

func (e *FencedError) Error() string {
	return fmt.Sprintf("persistence: shard %d fenced: epoch %d, store has %d", e.Shard, e.Have, e.Want)
}

// Is reports whether target is ErrFenced.
func (e *FencedError) Is(target error) bool { return target == ErrFenced }

// ValidateKey checks a (kind, id) pair against the limits every Store
// enforces: both non-empty valid UTF-8 without NUL bytes, within MaxKindLen
// and MaxIDLen.
func ValidateKey(kind, id string) error {
	if err := validName("kind", kind, MaxKindLen); err != nil {
		return err
	}
	return validName("id", id, MaxIDLen)
}

// validName checks a kind or ID in one pass over its ASCII prefix (every
// call validates the target's kind and ID; most are ASCII), the rest with
// utf8.ValidString.
func validName(what, s string, max int) error {
	switch {
	case s == "":
		return fmt.Errorf("%w: empty %s", ErrInvalid, what)
	case len(s) > max:
		return fmt.Errorf("%w: %s is %d bytes, limit %d", ErrInvalid, what, len(s), max)
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == 0:
			return badName(what, s)
		case c >= utf8.RuneSelf:
			if !utf8.ValidString(s[i:]) || strings.IndexByte(s[i:], 0) >= 0 {
				return badName(what, s)
			}
			return nil
		}
	}
	return nil
}

// badName says why s, which is not empty nor too long, is invalid: not
// UTF-8, or holding a NUL byte.
func badName(what, s string) error {
	if !utf8.ValidString(s) {
		return fmt.Errorf("%w: %s is not valid UTF-8", ErrInvalid, what)
	}
	return fmt.Errorf("%w: %s contains a NUL byte", ErrInvalid, what)
}

// ValidateEpoch checks that epoch is positive.
func ValidateEpoch(epoch int64) error {
	if epoch <= 0 {
		return fmt.Errorf("%w: epoch %d is not positive", ErrInvalid, epoch)
	}
	return nil
}

// ValidateBatch checks a Save batch: valid keys and epochs, non-nil data, no
// negative due time, no key twice, one epoch per shard, and valid events
// (ValidateEvents). Drivers call it before writing.
func ValidateBatch(recs []Record) error {
	type key struct{ kind, id string }
	seen := make(map[key]struct{}, len(recs))
	epochs := make(map[uint32]int64)
	for i := range recs {
		r := &recs[i]
		if err := ValidateKey(r.Kind, r.ID); err != nil {
			return fmt.Errorf("record %d: %w", i, err)
		}
		if err := ValidateEpoch(r.Epoch); err != nil {
			return fmt.Errorf("record %d (%s/%s): %w", i, r.Kind, r.ID, err)
		}
		if r.Data == nil {
			return fmt.Errorf("record %d (%s/%s): %w: nil data", i, r.Kind, r.ID, ErrInvalid)
		}
		if r.Due < 0 || r.PrevDue < 0 {
			return fmt.Errorf("record %d (%s/%s): %w: negative due time", i, r.Kind, r.ID, ErrInvalid)
		}
		if err := ValidateEvents(r.Events); err != nil {
			return fmt.Errorf("record %d (%s/%s): %w", i, r.Kind, r.ID, err)
		}
		if r.DeleteEventsBefore > MaxSeq {
			return fmt.Errorf("record %d (%s/%s): %w: DeleteEventsBefore %d is above MaxSeq",
				i, r.Kind, r.ID, ErrInvalid, r.DeleteEventsBefore)
		}
		k := key{r.Kind, r.ID}
		if _, dup := seen[k]; dup {
			return fmt.Errorf("record %d: %w: %s/%s appears twice in one batch", i, ErrInvalid, r.Kind, r.ID)
		}
		seen[k] = struct{}{}
		if e, ok := epochs[r.Shard]; ok && e != r.Epoch {
			return fmt.Errorf("record %d (%s/%s): %w: shard %d has epochs %d and %d in one batch",
				i, r.Kind, r.ID, ErrInvalid, r.Shard, e, r.Epoch)
		}
		epochs[r.Shard] = r.Epoch
	}
	return nil
}

// InvalidConfig returns err, a store driver's configuration error, so
// that it also matches ErrInvalidConfig; its message is err's.
func InvalidConfig(err error) error { return configerr.Wrap(ErrInvalidConfig, err) }
