package history

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Kind is the operation a history line records (the "op" field).
type Kind string

// The operations a bank client performs.
const (
	// OpTransfer moves Amount from account From to account To as a saga:
	// debit From and credit To.
	OpTransfer Kind = "transfer"
	// OpBalance reads the balance of Account.
	OpBalance Kind = "balance"
)

// Outcome is what the client learned about an operation (the "outcome" field).
type Outcome string

// The outcomes a client can record.
const (
	// OK means the operation took effect (a transfer debited and credited
	// exactly once) or, for a read, returned Balance.
	OK Outcome = "ok"
	// Rejected means the transfer had no effect at all. It is not a valid
	// outcome for balance reads.
	Rejected Outcome = "rejected"
	// Unknown means the client gave up without a definite answer (timeout,
	// connection loss); Ret is the time it gave up.
	Unknown Outcome = "unknown"
)

// Error texts that give a rejection its meaning. A checker compares them
// with IsInsufficientFunds and IsUnknownAccount, case-insensitively and as
// substrings, so "bank: insufficient funds" matches too.
const (
	// InsufficientFunds is the error text of a transfer rejected because
	// the source account's balance was lower than the amount.
	InsufficientFunds = "insufficient funds"
	// UnknownAccount is the error text of a transfer rejected because an
	// account does not exist.
	UnknownAccount = "unknown account"
)

// IsInsufficientFunds reports whether an error text says the transfer was
// rejected for insufficient funds.
func IsInsufficientFunds(errText string) bool {
	return strings.Contains(strings.ToLower(errText), InsufficientFunds)
}

// IsUnknownAccount reports whether an error text says the transfer was
// rejected because an account does not exist.
func IsUnknownAccount(errText string) bool {
	return strings.Contains(strings.ToLower(errText), UnknownAccount)
}

// ErrInvalid is matched (errors.Is) by every validation and decoding error
// of this package.
var ErrInvalid = errors.New("history: invalid op")

const accountPrefix = "acct-"

// MaxAccounts is the number of distinct account names: six decimal digits.
const MaxAccounts = 1_000_000

// AccountName returns the name of account i, "acct-" followed by i in six
// zero-padded digits. It returns "" when i is outside [0, MaxAccounts).
func AccountName(i int) string {
	if i < 0 || i >= MaxAccounts {
		return ""
	}
	return fmt.Sprintf("%s%06d", accountPrefix, i)
}

// ParseAccount returns the index of a well-formed account name, or an error
// matching ErrInvalid.
func ParseAccount(name string) (int, error) {
	n, ok := parseAccount(name)
	if !ok {
		return 0, fmt.Errorf("%w: bad account name %q (want acct-NNNNNN)", ErrInvalid, name)
	}
	return n, nil
}

func parseAccount(name string) (int, bool) {
	digits, ok := strings.CutPrefix(name, accountPrefix)
	if !ok || len(digits) != 6 {
		return 0, false
	}
	n := 0
	for _, c := range []byte(digits) {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}

// Op is one client operation, one line of a history. Which fields apply
// depends on Op: a transfer has ID, From, To and Amount; a balance read has
// Account and, when its outcome is OK, Balance. Error applies only to
// outcomes other than OK. Fields that do not apply are left zero and are
// omitted from the JSON form. An Op is a plain value; it is safe to copy and
// to share between goroutines that do not modify it.
type Op struct {
	// Client is the zero-based index of the client that issued the op.
	Client int
	// Op is the kind of operation.
	Op Kind
	// ID is the transfer's request ID, unique within a history; it is what
	// makes a retried transfer idempotent.
	ID string
	// From is the account a transfer debits.
	From string
	// To is the account a transfer credits.
	To string
	// Amount is the transferred amount in minor units, > 0.
	Amount int64
	// Account is the account a balance read reads.
	Account string
	// Call is when the client issued the op, in Unix nanoseconds.
	Call int64
	// Ret is when the client got its answer or gave up, in Unix
	// nanoseconds; Ret >= Call.
	Ret int64
	// Outcome is what the client learned.
	Outcome Outcome
	// Error is the error text of a rejected or unknown op.
	Error string
	// Balance is the balance an OK read returned.
	Balance int64
}

// wireOp is the JSON form of Op. Pointers tell a missing field from a zero
// one; the field order is the order of the documented format.
type wireOp struct {
	Client  *int    `json:"client"`
	Op      Kind    `json:"op"`
	ID      string  `json:"id,omitempty"`
	From    string  `json:"from,omitempty"`
	To      string  `json:"to,omitempty"`
	Amount  *int64  `json:"amount,omitempty"`
	Account string  `json:"account,omitempty"`
	Call    *int64  `json:"call"`
	Ret     *int64  `json:"ret"`
	Outcome Outcome `json:"outcome"`
	Error   string  `json:"error,omitempty"`
	Balance *int64  `json:"balance,omitempty"`
}

// hasBalance reports whether the balance field applies to o.
func (o Op) hasBalance() bool { return o.Op == OpBalance && o.Outcome == OK }

// MarshalJSON encodes o in the history format, omitting fields that do not
// apply to its kind and outcome. It does not validate o; Writer does.
func (o Op) MarshalJSON() ([]byte, error) {
	w := wireOp{
		Client:  &o.Client,
		Op:      o.Op,
		ID:      o.ID,
		From:    o.From,
		To:      o.To,
		Account: o.Account,
		Call:    &o.Call,
		Ret:     &o.Ret,
		Outcome: o.Outcome,
		Error:   o.Error,
	}
	if o.Op == OpTransfer || o.Amount != 0 {
		w.Amount = &o.Amount
	}
	if o.hasBalance() || o.Balance != 0 {
		w.Balance = &o.Balance
	}
	return json.Marshal(w)
}

// UnmarshalJSON decodes and validates one history object; see Decode.
func (o *Op) UnmarshalJSON(b []byte) error {
	op, err := Decode(b)
	if err != nil {
		return err
	}
	*o = op
	return nil
}

// Decode parses one history line (surrounding white space allowed) and
// validates it. Unknown fields, missing required fields, fields that do not
// apply to the op and every rule of Validate give an error matching
// ErrInvalid.
func Decode(line []byte) (Op, error) {
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	var w wireOp
	if err := dec.Decode(&w); err != nil {
		if errors.Is(err, io.EOF) {
			return Op{}, fmt.Errorf("%w: empty line", ErrInvalid)
		}
		return Op{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return Op{}, fmt.Errorf("%w: trailing data after the JSON object", ErrInvalid)
	}
	var missing []string
	if w.Client == nil {
		missing = append(missing, "client")
	}
	if w.Op == "" {
		missing = append(missing, "op")
	}
	if w.Call == nil {
		missing = append(missing, "call")
	}
	if w.Ret == nil {
		missing = append(missing, "ret")
	}
	if w.Outcome == "" {
		missing = append(missing, "outcome")
	}
	if w.Op == OpTransfer && w.Amount == nil {
		missing = append(missing, "amount")
	}
	if w.Op == OpBalance && w.Outcome == OK && w.Balance == nil {
		missing = append(missing, "balance")
	}
	if len(missing) > 0 {
		return Op{}, fmt.Errorf("%w: missing field %s", ErrInvalid, strings.Join(missing, ", "))
	}
	if w.Op == OpBalance && w.Amount != nil {
		return Op{}, fmt.Errorf("%w: field amount does not apply to op %q", ErrInvalid, w.Op)
	}
	if w.Balance != nil && !(w.Op == OpBalance && w.Outcome == OK) {
		return Op{}, fmt.Errorf("%w: field balance applies only to ok balance reads", ErrInvalid)
	}
	op := Op{
		Client:  *w.Client,
		Op:      w.Op,
		ID:      w.ID,
		From:    w.From,
		To:      w.To,
		Account: w.Account,
		Call:    *w.Call,
		Ret:     *w.Ret,
		Outcome: w.Outcome,
		Error:   w.Error,
	}
	if w.Amount != nil {
		op.Amount = *w.Amount
	}
	if w.Balance != nil {
		op.Balance = *w.Balance
	}
	if err := op.Validate(); err != nil {
		return Op{}, err
	}
	return op, nil
}

// Validate checks o against the history format and returns an error
// matching ErrInvalid that names the first broken rule: a known op and an
// outcome valid for it, client >= 0, 0 <= call <= ret, well-formed account
// names, a non-empty transfer ID, amount > 0, error text only on non-ok
// outcomes and no field that does not apply to the op. Validate cannot tell
// a missing balance from a zero one; Decode does.
func (o Op) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
	}
	if o.Client < 0 {
		return bad("client %d < 0", o.Client)
	}
	if o.Call < 0 {
		return bad("call %d < 0", o.Call)
	}
	if o.Ret < o.Call {
		return bad("ret %d < call %d", o.Ret, o.Call)
	}
	if o.Outcome == OK && o.Error != "" {
		return bad("error %q on an ok outcome", o.Error)
	}
	switch o.Op {
	case OpTransfer:
		switch o.Outcome {
		case OK, Rejected, Unknown:
		default:
			return bad("unknown outcome %q for op transfer", o.Outcome)
		}
		if o.ID == "" {
			return bad("transfer without id")
		}
		if _, ok := parseAccount(o.From); !ok {
			return bad("from: bad account name %q (want acct-NNNNNN)", o.From)
		}
		if _, ok := parseAccount(o.To); !ok {
			return bad("to: bad account name %q (want acct-NNNNNN)", o.To)
		}
		if o.Amount <= 0 {
			return bad("amount %d <= 0", o.Amount)
		}
		if o.Account != "" {
			return bad("field account does not apply to op transfer")
		}
		if o.Balance != 0 {
			return bad("field balance does not apply to op transfer")
		}
	case OpBalance:
		switch o.Outcome {
		case OK, Unknown:
		default:
			return bad("unknown outcome %q for op balance", o.Outcome)
		}
		if _, ok := parseAccount(o.Account); !ok {
			return bad("account: bad account name %q (want acct-NNNNNN)", o.Account)
		}
		switch {
		case o.ID != "":
			return bad("field id does not apply to op balance")
		case o.From != "":
			return bad("field from does not apply to op balance")
		case o.To != "":
			return bad("field to does not apply to op balance")
		case o.Amount != 0:
			return bad("field amount does not apply to op balance")
		case o.Outcome != OK && o.Balance != 0:
			return bad("field balance applies only to ok balance reads")
		}
	default:
		return bad("unknown op %q", o.Op)
	}
	return nil
}

// String returns a short human-readable form of o for reports and logs.
func (o Op) String() string {
	var b strings.Builder
	switch o.Op {
	case OpTransfer:
		fmt.Fprintf(&b, "transfer %s %s->%s %d", o.ID, o.From, o.To, o.Amount)
	case OpBalance:
		fmt.Fprintf(&b, "balance %s", o.Account)
		if o.hasBalance() {
			b.WriteString(" = " + strconv.FormatInt(o.Balance, 10))
		}
	default:
		fmt.Fprintf(&b, "%q", o.Op)
	}
	fmt.Fprintf(&b, " [%d, %d] client %d %s", o.Call, o.Ret, o.Client, o.Outcome)
	if o.Error != "" {
		fmt.Fprintf(&b, " (%s)", o.Error)
	}
	return b.String()
}
