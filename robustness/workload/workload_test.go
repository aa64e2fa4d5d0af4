package workload

import (
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ordo-actors/ordo/actors"
	"github.com/ordo-actors/ordo/examples/bank/ledger"
	"github.com/ordo-actors/ordo/proto/bankpb"
	"github.com/ordo-actors/ordo/robustness/history"
)

func TestTransferOutcome(t *testing.T) {
	st := func(s bankpb.TransferStatus, code string) *bankpb.TransferState {
		return &bankpb.TransferState{Status: s, Error: code}
	}
	cases := []struct {
		name    string
		st      *bankpb.TransferState
		err     error
		outcome history.Outcome
		check   func(string) bool
	}{
		{"completed", st(bankpb.TransferStatus_TRANSFER_STATUS_COMPLETED, ""), nil, history.OK, func(s string) bool { return s == "" }},
		{"insufficient", st(bankpb.TransferStatus_TRANSFER_STATUS_REJECTED, ledger.CodeInsufficientFunds), nil, history.Rejected, history.IsInsufficientFunds},
		{"unknown account", st(bankpb.TransferStatus_TRANSFER_STATUS_REJECTED, ledger.CodeUnknownAccount), nil, history.Rejected, history.IsUnknownAccount},
		{"compensated", st(bankpb.TransferStatus_TRANSFER_STATUS_COMPENSATED, ledger.CodeUnknownAccount), nil, history.Rejected, history.IsUnknownAccount},
		{"in progress", st(bankpb.TransferStatus_TRANSFER_STATUS_DEBITING, ""), nil, history.Unknown, func(s string) bool { return s != "" }},
		{"submit refused", nil, actors.HandlerError(ledger.CodeUnknownAccount, "bad"), history.Rejected, history.IsUnknownAccount},
		{"timeout", nil, errors.New("context deadline exceeded"), history.Unknown, func(s string) bool { return s != "" }},
	}
	for _, c := range cases {
		o, text := TransferOutcome(c.st, c.err)
		if o != c.outcome || !c.check(text) {
			t.Errorf("%s: got %s %q", c.name, o, text)
		}
	}
}

func TestPickerSkew(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	p := NewPicker(1000, 1.0)
	counts := make([]int, 1000)
	for range 100000 {
		from, to := p.Pair(rng)
		if from == to {
			t.Fatal("pair of one account")
		}
		counts[from]++
	}
	if counts[0] < 10*counts[500] || counts[0] < 5000 {
		t.Fatalf("not skewed: account 0 drawn %d times, account 500 %d", counts[0], counts[500])
	}
	u := NewPicker(10, 0)
	for range 1000 {
		if i := u.Next(rng); i < 0 || i >= 10 {
			t.Fatalf("uniform pick %d out of range", i)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	for _, mutate := range []func(*Config){
		func(c *Config) { c.Accounts = 1 },
		func(c *Config) { c.Duration = 0 },
		func(c *Config) { c.Concurrency = 0 },
		func(c *Config) { c.Zipf = -1 },
		func(c *Config) { c.MaxAmount = 0 },
		func(c *Config) { c.ReadRatio = 1.5 },
		func(c *Config) { c.OpTimeout = -time.Second },
		func(c *Config) { c.Nonce = "a/b" },
	} {
		c := DefaultConfig()
		mutate(&c)
		if c.Validate() == nil {
			t.Errorf("invalid config accepted: %+v", c)
		}
	}
}
