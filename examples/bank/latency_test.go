package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// spanLine is one span as the stdout exporter writes it: id is its span
// ID, links the span IDs it links to.
func spanLine(t *testing.T, trace, id, parent, name, message string, start, end time.Duration, links ...string) string {
	t.Helper()
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	s := map[string]any{
		"Name":        name,
		"SpanContext": map[string]any{"TraceID": trace, "SpanID": id},
		"Parent":      map[string]any{"SpanID": parent},
		"StartTime":   t0.Add(start),
		"EndTime":     t0.Add(end),
	}
	if message != "" {
		s["Attributes"] = []any{map[string]any{"Key": "ordo.message", "Value": map[string]any{"Type": "STRING", "Value": message}}}
	}
	var ls []any
	for _, l := range links {
		ls = append(ls, map[string]any{"SpanContext": map[string]any{"TraceID": "other", "SpanID": l}})
	}
	if ls != nil {
		s["Links"] = ls
	}
	b, err := json.Marshal(s)
	require.NoError(t, err)
	return string(b)
}

// transferSpans are the spans of one transfer: each hop takes hop[i]
// milliseconds. The debit's and the credit's writes are each carried by
// a Save (ordo.save) that starts a quarter into the step's durable hop
// and lasts half of it; the debit's Save is its run's child, the
// credit's links it.
func transferSpans(t *testing.T, trace string, hop [6]int) []string {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	at := []time.Duration{0}
	for _, h := range hop {
		at = append(at, at[len(at)-1]+ms(h))
	}
	quarter := func(i int) time.Duration { return (at[i+1] - at[i]) / 4 }
	root := "0000000000000000"
	debit, credit := trace+"-debit", trace+"-credit"
	return []string{
		spanLine(t, trace, trace+"-root", root, "ordo.call", "ordo.bank.v1.SubmitTransfer", 0, at[6]),
		spanLine(t, trace, trace+"-saga", "a1", "ordo.handle", "ordo.bank.v1.SubmitTransfer", at[1], at[1]),
		spanLine(t, trace, debit, "a2", "ordo.handle", "ordo.bank.v1.Debit", at[2], at[2]),
		spanLine(t, trace, trace+"-save1", debit, "ordo.save", "", at[2]+quarter(2), at[3]-quarter(2)),
		spanLine(t, trace, trace+"-store1", trace+"-save1", "ordo.store.save", "", at[2], at[3]),
		spanLine(t, trace, trace+"-c1", "a4", "ordo.continue", "", at[3], at[3]),
		spanLine(t, trace, credit, "a5", "ordo.handle", "ordo.bank.v1.Credit", at[4], at[4]),
		spanLine(t, "other", trace+"-save2", "x", "ordo.save", "", at[4]+quarter(4), at[5]-quarter(4), "y", credit),
		spanLine(t, trace, trace+"-c2", "a6", "ordo.continue", "", at[5], at[5]),
		// After the answer: the forgets and their acknowledgements.
		spanLine(t, trace, trace+"-f", "a7", "ordo.handle", "ordo.bank.v1.Forget", at[6]+ms(1), at[6]+ms(1)),
		spanLine(t, trace, trace+"-c3", "a8", "ordo.continue", "", at[6]+ms(5), at[6]+ms(5)),
	}
}

func writeLines(t *testing.T, lines []string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "spans.jsonl")
	require.NoError(t, os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600))
	return path
}

// Each hop is measured between the spans that bound it; a transfer
// without a credit (a rejection) or with a step retried is left out.
func TestLatencyBreakdown(t *testing.T) {
	var lines []string
	lines = append(lines, transferSpans(t, "t1", [6]int{1, 2, 10, 3, 20, 4})...)
	lines = append(lines, transferSpans(t, "t2", [6]int{3, 2, 30, 1, 10, 2})...)
	lines = append(lines, transferSpans(t, "t3", [6]int{2, 2, 20, 2, 30, 6})...)
	rejected := transferSpans(t, "t4", [6]int{1, 1, 1, 1, 1, 1})
	lines = append(lines, rejected[:6]...) // no credit
	retried := transferSpans(t, "t5", [6]int{1, 1, 1, 1, 1, 1})
	lines = append(lines, append(retried, retried[2])...) // the debit handled twice
	// A transfer whose credit's Save was not traced counts in the hops,
	// not in their split.
	unsplit := transferSpans(t, "t7", [6]int{2, 2, 20, 2, 30, 6})
	lines = append(lines, append(unsplit[:7], unsplit[8:]...)...)
	lines = append(lines, spanLine(t, "t6", "t6-root", "0000000000000000", "ordo.call", "ordo.bank.v1.GetBalance", 0, time.Millisecond))

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	code, out, stderr := runCLI(t, ctx, "latency", "--trace", writeLines(t, lines), "--output", "json")
	require.Equal(t, exitOK, code, stderr)
	var rep latencyReport
	require.NoError(t, json.Unmarshal([]byte(out), &rep))
	require.Equal(t, 4, rep.Transfers)
	require.Equal(t, 2, rep.LeftOut)
	requireStats(t, 4, rep.Hops, []hopStats{
		{Name: "client -> saga", P50: 2, P90: 3, Mean: 2},
		{Name: "saga -> debit", P50: 2, P90: 2, Mean: 2},
		{Name: "debit -> durable", P50: 20, P90: 30, Mean: 20},
		{Name: "ack -> credit", P50: 2, P90: 3, Mean: 2},
		{Name: "credit -> ack", P50: 20, P90: 30, Mean: 22.5},
		{Name: "outcome -> client", P50: 4, P90: 6, Mean: 4.5},
		{Name: "total", P50: 48, P90: 62, Mean: 53}, // 40, 48, 62 and 62
	})
	require.Equal(t, 6, rep.Saves.N) // every traced Save, left-out transfers' too
	require.Equal(t, 10.0, rep.Saves.P50)

	// The durable hops split over the three transfers with both Saves
	// traced: a quarter to the Save, half in it, a quarter to the ack.
	require.Equal(t, 3, rep.DurableTransfers)
	requireStats(t, 3, rep.Durable, []hopStats{
		{Name: "debit: to its Save", P50: 5, P90: 7.5, Mean: 5},
		{Name: "debit: its Save", P50: 10, P90: 15, Mean: 10},
		{Name: "debit: Save -> ack", P50: 5, P90: 7.5, Mean: 5},
		{Name: "credit: to its Save", P50: 5, P90: 7.5, Mean: 5},
		{Name: "credit: its Save", P50: 10, P90: 15, Mean: 10},
		{Name: "credit: Save -> ack", P50: 5, P90: 7.5, Mean: 5},
	})

	code, out, stderr = runCLI(t, ctx, "latency", "--trace", writeLines(t, lines))
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, out, "4 traced transfers broken down (2 left out")
	require.Regexp(t, `debit -> durable\s+20\.00\s+30\.00\s+20\.00`, out)
	require.Contains(t, out, "over the 3 transfers whose debit and credit Saves were traced")
	require.Regexp(t, `credit: its Save\s+10\.00\s+15\.00\s+10\.00`, out)
}

// requireStats checks each of got against want (names, percentiles and
// means), every one over n transfers.
func requireStats(t *testing.T, n int, got, want []hopStats) {
	t.Helper()
	require.Len(t, got, len(want))
	for i, w := range want {
		h := got[i]
		require.Equal(t, w.Name, h.Name)
		require.Equal(t, n, h.N, h.Name)
		require.Equal(t, w.P50, h.P50, h.Name)
		require.Equal(t, w.P90, h.P90, h.Name)
		require.InDelta(t, w.Mean, h.Mean, 0.001, h.Name)
	}
}

func TestLatencyBadInput(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ok := transferSpans(t, "t1", [6]int{1, 1, 1, 1, 1, 1})
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"latency"}, exitUsage, "--trace is required"},
		{[]string{"latency", "--trace", "x", "--output", "csv"}, exitUsage, `--output "csv"`},
		{[]string{"latency", "--trace", filepath.Join(t.TempDir(), "missing")}, 1, "reading the spans"},
		{[]string{"latency", "--trace", writeLines(t, []string{ok[0], "{not json"})}, 1, "line 2"},
		{[]string{"latency", "--trace", writeLines(t, []string{ok[0], `{"Name":"x"}`})}, 1, "line 2: not a span"},
		{[]string{"latency", "--trace", writeLines(t, []string{ok[0], strings.Repeat("x", maxSpanLine+1)})}, 1, "longer than"},
		{[]string{"latency", "--trace", writeLines(t, ok[:4])}, 1, "no traced transfer that completed on its first attempt (1 left out)"},
	}
	for _, c := range cases {
		t.Run(fmt.Sprint(c.args), func(t *testing.T) {
			code, _, stderr := runCLI(t, ctx, c.args...)
			require.Equal(t, c.code, code, stderr)
			require.Contains(t, stderr, c.want)
		})
	}
}

// The spans bank demo --trace writes break down.
func TestLatencyOfDemoTrace(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	code, out, stderr := runCLI(t, ctx, "latency", "--trace", demoSpans(t, ctx, "5"), "--output", "json")
	require.Equal(t, exitOK, code, stderr)
	var rep latencyReport
	require.NoError(t, json.Unmarshal([]byte(out), &rep))
	require.Positive(t, rep.Transfers)
	require.Positive(t, rep.Saves.N)
	var sum float64
	for _, h := range rep.Hops[:len(hopNames)] {
		require.GreaterOrEqual(t, h.P50, 0.0, h.Name)
		sum += h.Mean
	}
	require.InDelta(t, rep.Hops[len(hopNames)].Mean, sum, 0.01, "the hops add up to the call")
	require.Positive(t, rep.Hops[2].Mean, "a debit takes a Save")
	// Every Save carrying a traced write is traced: each transfer's two
	// durable hops split, and their parts add up to them.
	require.Equal(t, rep.Transfers, rep.DurableTransfers)
	require.InDelta(t, rep.Hops[2].Mean, rep.Durable[0].Mean+rep.Durable[1].Mean+rep.Durable[2].Mean, 0.01, "the debit's parts")
	require.InDelta(t, rep.Hops[4].Mean, rep.Durable[3].Mean+rep.Durable[4].Mean+rep.Durable[5].Mean, 0.01, "the credit's parts")
}
