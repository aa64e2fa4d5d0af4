package history_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/ordo-actors/ordo/robustness/history"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func sampleOps() []history.Op {
	return []history.Op{
		{Client: 3, Op: history.OpTransfer, ID: "t-1", From: "acct-000001", To: "acct-000007", Amount: 5, Call: 100, Ret: 200, Outcome: history.OK},
		{Client: 2, Op: history.OpTransfer, ID: "t-2", From: "acct-000001", To: "acct-000002", Amount: 5000, Call: 150, Ret: 250, Outcome: history.Rejected, Error: "insufficient funds"},
		{Client: 0, Op: history.OpTransfer, ID: "t-3", From: "acct-000002", To: "acct-000003", Amount: 1, Call: 150, Ret: 950, Outcome: history.Unknown, Error: "context deadline exceeded"},
		{Client: 1, Op: history.OpBalance, Account: "acct-000001", Call: 300, Ret: 400, Outcome: history.OK, Balance: 995},
		{Client: 1, Op: history.OpBalance, Account: "acct-000009", Call: 500, Ret: 600, Outcome: history.OK, Balance: 0},
		{Client: 4, Op: history.OpBalance, Account: "acct-000002", Call: 500, Ret: 900, Outcome: history.Unknown, Error: "connection reset"},
	}
}

func TestRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	w := history.NewWriter(&buf)
	for _, op := range sampleOps() {
		if err := w.Append(op); err != nil {
			t.Fatalf("Append(%v): %v", op, err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	got, err := history.ReadAll(&buf)
	if err != nil {
		t.Fatal(err)
	}
	want := sampleOps()
	if len(got) != len(want) {
		t.Fatalf("read %d ops, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("op %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
}

func TestJSONFieldsExact(t *testing.T) {
	var buf bytes.Buffer
	w := history.NewWriter(&buf)
	for _, op := range sampleOps()[:5] {
		if err := w.Append(op); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	want := `{"client":3,"op":"transfer","id":"t-1","from":"acct-000001","to":"acct-000007","amount":5,"call":100,"ret":200,"outcome":"ok"}
{"client":2,"op":"transfer","id":"t-2","from":"acct-000001","to":"acct-000002","amount":5000,"call":150,"ret":250,"outcome":"rejected","error":"insufficient funds"}
{"client":0,"op":"transfer","id":"t-3","from":"acct-000002","to":"acct-000003","amount":1,"call":150,"ret":950,"outcome":"unknown","error":"context deadline exceeded"}
{"client":1,"op":"balance","account":"acct-000001","call":300,"ret":400,"outcome":"ok","balance":995}
{"client":1,"op":"balance","account":"acct-000009","call":500,"ret":600,"outcome":"ok","balance":0}
`
	if buf.String() != want {
		t.Errorf("encoded:\n%s\nwant:\n%s", buf.String(), want)
	}
}

func TestReaderRejectsMalformed(t *testing.T) {
	good := `{"client":1,"op":"balance","account":"acct-000001","call":1,"ret":2,"outcome":"ok","balance":5}`
	cases := []struct {
		name, line, want string
	}{
		{"not json", `{"client":1,`, "unexpected EOF"},
		{"garbage", `hello`, "invalid character"},
		{"trailing", good + ` {}`, "trailing data"},
		{"unknown op", `{"client":1,"op":"deposit","account":"acct-000001","call":1,"ret":2,"outcome":"ok"}`, `unknown op "deposit"`},
		{"unknown outcome", `{"client":1,"op":"transfer","id":"t","from":"acct-000001","to":"acct-000002","amount":1,"call":1,"ret":2,"outcome":"maybe"}`, `unknown outcome "maybe"`},
		{"rejected read", `{"client":1,"op":"balance","account":"acct-000001","call":1,"ret":2,"outcome":"rejected"}`, `unknown outcome "rejected" for op balance`},
		{"missing client", `{"op":"balance","account":"acct-000001","call":1,"ret":2,"outcome":"ok","balance":5}`, "missing field client"},
		{"missing call ret", `{"client":1,"op":"balance","account":"acct-000001","outcome":"ok","balance":5}`, "missing field call, ret"},
		{"missing balance", `{"client":1,"op":"balance","account":"acct-000001","call":1,"ret":2,"outcome":"ok"}`, "missing field balance"},
		{"missing amount", `{"client":1,"op":"transfer","id":"t","from":"acct-000001","to":"acct-000002","call":1,"ret":2,"outcome":"ok"}`, "missing field amount"},
		{"missing id", `{"client":1,"op":"transfer","from":"acct-000001","to":"acct-000002","amount":1,"call":1,"ret":2,"outcome":"ok"}`, "transfer without id"},
		{"zero amount", `{"client":1,"op":"transfer","id":"t","from":"acct-000001","to":"acct-000002","amount":0,"call":1,"ret":2,"outcome":"ok"}`, "amount 0 <= 0"},
		{"negative amount", `{"client":1,"op":"transfer","id":"t","from":"acct-000001","to":"acct-000002","amount":-3,"call":1,"ret":2,"outcome":"ok"}`, "amount -3 <= 0"},
		{"ret before call", `{"client":1,"op":"balance","account":"acct-000001","call":5,"ret":2,"outcome":"ok","balance":5}`, "ret 2 < call 5"},
		{"bad from", `{"client":1,"op":"transfer","id":"t","from":"alice","to":"acct-000002","amount":1,"call":1,"ret":2,"outcome":"ok"}`, `from: bad account name "alice"`},
		{"short account", `{"client":1,"op":"balance","account":"acct-01","call":1,"ret":2,"outcome":"ok","balance":5}`, `account: bad account name "acct-01"`},
		{"unknown field", `{"client":1,"op":"balance","account":"acct-000001","call":1,"ret":2,"outcome":"ok","balance":5,"extra":1}`, `unknown field "extra"`},
		{"balance on transfer", `{"client":1,"op":"transfer","id":"t","from":"acct-000001","to":"acct-000002","amount":1,"call":1,"ret":2,"outcome":"ok","balance":3}`, "balance applies only"},
		{"amount on read", `{"client":1,"op":"balance","account":"acct-000001","amount":1,"call":1,"ret":2,"outcome":"ok","balance":5}`, "amount does not apply"},
		{"error on ok", `{"client":1,"op":"balance","account":"acct-000001","call":1,"ret":2,"outcome":"ok","balance":5,"error":"x"}`, `error "x" on an ok outcome`},
		{"wrong type", `{"client":"one","op":"balance","account":"acct-000001","call":1,"ret":2,"outcome":"ok","balance":5}`, "cannot unmarshal"},
		{"overflow", `{"client":1,"op":"balance","account":"acct-000001","call":1e30,"ret":2,"outcome":"ok","balance":5}`, "cannot unmarshal"},
		{"negative client", `{"client":-1,"op":"balance","account":"acct-000001","call":1,"ret":2,"outcome":"ok","balance":5}`, "client -1 < 0"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			input := good + "\n\n" + good + "\n" + tc.line + "\n" + good + "\n"
			_, err := history.ReadAll(strings.NewReader(input))
			var le *history.LineError
			if !errors.As(err, &le) {
				t.Fatalf("ReadAll error = %v, want a *LineError", err)
			}
			if le.Line != 4 {
				t.Errorf("line = %d, want 4 (%v)", le.Line, err)
			}
			if !errors.Is(err, history.ErrInvalid) {
				t.Errorf("error %v does not match ErrInvalid", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not mention %q", err, tc.want)
			}
		})
	}
}

func TestReaderLongLine(t *testing.T) {
	input := strings.Repeat("x", history.MaxLineBytes+10) + "\n"
	_, err := history.ReadAll(strings.NewReader(input))
	var le *history.LineError
	if !errors.As(err, &le) || le.Line != 1 || !errors.Is(err, history.ErrInvalid) {
		t.Fatalf("error = %v, want an invalid *LineError on line 1", err)
	}
}

func TestReaderNextAfterEOF(t *testing.T) {
	r := history.NewReader(strings.NewReader(""))
	for range 2 {
		if _, err := r.Next(); !errors.Is(err, io.EOF) {
			t.Fatalf("Next() = %v, want io.EOF", err)
		}
	}
}

func TestWriterRejectsInvalid(t *testing.T) {
	var buf bytes.Buffer
	w := history.NewWriter(&buf)
	err := w.Append(history.Op{Op: history.OpTransfer, ID: "t", From: "acct-000001", To: "acct-000002", Amount: 0, Outcome: history.OK})
	if !errors.Is(err, history.ErrInvalid) {
		t.Fatalf("Append = %v, want ErrInvalid", err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if buf.Len() != 0 {
		t.Fatalf("invalid op was written: %q", buf.String())
	}
	if err := w.Append(sampleOps()[0]); !errors.Is(err, history.ErrClosed) {
		t.Fatalf("Append after Close = %v, want ErrClosed", err)
	}
	if err := w.Close(); err != nil {
		t.Fatalf("second Close = %v", err)
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestWriterStickyError(t *testing.T) {
	w := history.NewWriter(failWriter{})
	if err := w.Append(sampleOps()[0]); err != nil {
		t.Fatalf("buffered Append = %v", err)
	}
	if err := w.Flush(); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("Flush = %v, want disk full", err)
	}
	if err := w.Append(sampleOps()[0]); err == nil {
		t.Fatal("Append after a failed flush succeeded")
	}
	if err := w.Close(); err == nil {
		t.Fatal("Close after a failed flush succeeded")
	}
}

func TestWriterConcurrentFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "history.jsonl")
	w, err := history.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	const clients, perClient = 8, 500
	var wg sync.WaitGroup
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perClient {
				op := history.Op{
					Client: c, Op: history.OpTransfer, ID: fmt.Sprintf("t-%d-%d", c, i),
					From: history.AccountName(c), To: history.AccountName(c + 1), Amount: int64(i + 1),
					Call: int64(i), Ret: int64(i + 1), Outcome: history.OK,
				}
				if err := w.Append(op); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	ops, err := history.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(ops) != clients*perClient {
		t.Fatalf("read %d ops, want %d", len(ops), clients*perClient)
	}
	seen := map[string]bool{}
	for _, op := range ops {
		seen[op.ID] = true
	}
	if len(seen) != clients*perClient {
		t.Fatalf("%d distinct ids, want %d", len(seen), clients*perClient)
	}
}

func TestReadFileErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := history.ReadFile(filepath.Join(dir, "missing.jsonl")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("ReadFile(missing) = %v", err)
	}
	path := filepath.Join(dir, "bad.jsonl")
	if err := os.WriteFile(path, []byte("{\"client\":1}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := history.ReadFile(path)
	var le *history.LineError
	if !errors.As(err, &le) || le.Line != 1 || !strings.Contains(err.Error(), path) {
		t.Fatalf("ReadFile(bad) = %v, want a line 1 error naming the file", err)
	}
}

func TestAccountNames(t *testing.T) {
	for _, i := range []int{0, 7, 999999} {
		n, err := history.ParseAccount(history.AccountName(i))
		if err != nil || n != i {
			t.Errorf("ParseAccount(AccountName(%d)) = %d, %v", i, n, err)
		}
	}
	if history.AccountName(-1) != "" || history.AccountName(history.MaxAccounts) != "" {
		t.Error("AccountName accepted an out-of-range index")
	}
	for _, bad := range []string{"", "acct-", "acct-1234567", "acct-12345a", "ACCT-000001", "acct--00001", "acct-+00001"} {
		if _, err := history.ParseAccount(bad); !errors.Is(err, history.ErrInvalid) {
			t.Errorf("ParseAccount(%q) = %v, want ErrInvalid", bad, err)
		}
	}
}

func TestErrorTexts(t *testing.T) {
	if !history.IsInsufficientFunds("bank: Insufficient funds in acct-000001") || history.IsInsufficientFunds("unknown account") {
		t.Error("IsInsufficientFunds")
	}
	if !history.IsUnknownAccount("bank: unknown account acct-000099") || history.IsUnknownAccount("insufficient funds") {
		t.Error("IsUnknownAccount")
	}
}

func FuzzDecode(f *testing.F) {
	for _, op := range sampleOps() {
		b, err := op.MarshalJSON()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"client":1,"op":"balance","account":"acct-000001","call":1,"ret":2,"outcome":"ok","balance":null}`))
	f.Add([]byte(`{"client":1,"op":"transfer","amount":-1}`))
	f.Add([]byte(`[]`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, line []byte) {
		op, err := history.Decode(line)
		if err != nil {
			if !errors.Is(err, history.ErrInvalid) {
				t.Fatalf("Decode error %v does not match ErrInvalid", err)
			}
			return
		}
		if err := op.Validate(); err != nil {
			t.Fatalf("decoded op fails Validate: %v", err)
		}
		b, err := op.MarshalJSON()
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		again, err := history.Decode(b)
		if err != nil {
			t.Fatalf("re-decode of %s: %v", b, err)
		}
		if again != op {
			t.Fatalf("round trip changed the op: %+v != %+v", again, op)
		}
	})
}

func ExampleWriter() {
	var buf bytes.Buffer
	w := history.NewWriter(&buf)
	_ = w.Append(history.Op{
		Client: 3, Op: history.OpTransfer, ID: "t-1", From: history.AccountName(1), To: history.AccountName(7),
		Amount: 5, Call: 1000, Ret: 2000, Outcome: history.OK,
	})
	_ = w.Append(history.Op{
		Client: 1, Op: history.OpBalance, Account: history.AccountName(1),
		Call: 2500, Ret: 3000, Outcome: history.OK, Balance: 995,
	})
	if err := w.Close(); err != nil {
		fmt.Println(err)
	}
	fmt.Print(buf.String())
	ops, err := history.ReadAll(&buf)
	fmt.Println(len(ops), err)
	// Output:
	// {"client":3,"op":"transfer","id":"t-1","from":"acct-000001","to":"acct-000007","amount":5,"call":1000,"ret":2000,"outcome":"ok"}
	// {"client":1,"op":"balance","account":"acct-000001","call":2500,"ret":3000,"outcome":"ok","balance":995}
	// 2 <nil>
}
