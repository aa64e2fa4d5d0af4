package chaos

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/ordo-actors/ordo/examples/bank/ledger"
	"github.com/ordo-actors/ordo/proto/bankpb"
	"github.com/ordo-actors/ordo/robustness/history"
)

// Sagas is what became of the transfers the load left unknown, read
// (without resubmitting them) between the end of the load and the check.
type Sagas struct {
	// Unknown is the number of transfers the history records as unknown.
	Unknown int `json:"unknown"`
	// SettledMS is how long after the load ended every one of them was
	// final or never submitted; -1 when some were not within the wait.
	SettledMS int64 `json:"settled_ms"`
	// Pending lists those still not final at the end of the wait, with
	// their status.
	Pending map[string]string `json:"pending,omitempty"`
	// ByStatus counts the last status read of each ("never submitted"
	// for a submit that did not arrive, "unreadable" for a failed read).
	ByStatus map[string]int `json:"by_status"`
}

// statusReader reads the state of transfer id from account from. Safe
// for concurrent use.
type statusReader func(ctx context.Context, id, from string) (*bankpb.TransferState, error)

// watchSagas reads the state of every transfer the history left unknown,
// every 500 ms, until each is final (or was never submitted) or wait
// passes.
func watchSagas(ctx context.Context, read statusReader, ops []history.Op, wait time.Duration) Sagas {
	var ids []string
	from := map[string]string{}
	for _, op := range ops {
		if op.Op == history.OpTransfer && op.Outcome == history.Unknown {
			ids = append(ids, op.ID)
			from[op.ID] = op.From
		}
	}
	s := Sagas{Unknown: len(ids), SettledMS: -1}
	start := time.Now()
	last := map[string]string{}
	var mu sync.Mutex
	for {
		var wg sync.WaitGroup
		for _, id := range ids {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				st, err := read(rctx, id, from[id])
				cancel()
				status := "unreadable"
				switch {
				case err != nil && strings.Contains(err.Error(), ledger.CodeUnknownTransfer):
					status = "never submitted"
				case err == nil:
					status = strings.ToLower(strings.TrimPrefix(st.Status.String(), "TRANSFER_STATUS_"))
				}
				mu.Lock()
				last[id] = status
				mu.Unlock()
			}()
		}
		wg.Wait()
		var pending []string
		for _, id := range ids {
			switch last[id] {
			case "completed", "rejected", "compensated", "never submitted":
			default:
				pending = append(pending, id)
			}
		}
		if len(pending) == 0 {
			s.SettledMS = time.Since(start).Milliseconds()
			ids = nil
		}
		if len(pending) == 0 || time.Since(start) > wait || sleepCtx(ctx, 500*time.Millisecond) != nil {
			if len(pending) > 0 {
				s.Pending = map[string]string{}
				for _, id := range pending {
					s.Pending[id] = last[id]
				}
			}
			break
		}
		ids = pending
	}
	s.ByStatus = map[string]int{}
	for _, st := range last {
		s.ByStatus[st]++
	}
	return s
}

func (s Sagas) String() string {
	var parts []string
	for st, n := range s.ByStatus {
		parts = append(parts, fmt.Sprintf("%s %d", st, n))
	}
	sort.Strings(parts)
	settled := fmt.Sprintf("settled %d ms after the load", s.SettledMS)
	if s.SettledMS < 0 {
		settled = fmt.Sprintf("%d NOT settled", len(s.Pending))
	}
	return fmt.Sprintf("%d unknown transfers: %s; %s", s.Unknown, strings.Join(parts, ", "), settled)
}
