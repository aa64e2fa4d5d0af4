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

// spanLine is one span as the stdout exporter writes it.
func spanLine(t *testing.T, trace, parent, name, message string, start, end time.Duration) string {
	t.Helper()
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	s := map[string]any{
		"Name":        name,
		"SpanContext": map[string]any{"TraceID": trace},
		"Parent":      map[string]any{"SpanID": parent},
		"StartTime":   t0.Add(start),
		"EndTime":     t0.Add(end),
	}
	if message != "" {
		s["Attributes"] = []any{map[string]any{"Key": "ordo.message", "Value": map[string]any{"Type": "STRING", "Value": message}}}
	}
	b, err := json.Marshal(s)
	require.NoError(t, err)
	return string(b)
}

// transferSpans are the spans of one transfer: each hop takes hop[i]
// milliseconds.
func transferSpans(t *testing.T, trace string, hop [6]int) []string {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	at := []time.Duration{0}
	for _, h := range hop {
		at = append(at, at[len(at)-1]+ms(h))
	}
	root := "0000000000000000"
	return []string{
		spanLine(t, trace, root, "ordo.call", "ordo.bank.v1.SubmitTransfer", 0, at[6]),
		spanLine(t, trace, "a1", "ordo.handle", "ordo.bank.v1.SubmitTransfer", at[1], at[1]),
		spanLine(t, trace, "a2", "ordo.handle", "ordo.bank.v1.Debit", at[2], at[2]),
		spanLine(t, trace, "a3", "ordo.store.save", "", at[2], at[3]),
		spanLine(t, trace, "a4", "ordo.continue", "", at[3], at[3]),
		spanLine(t, trace, "a5", "ordo.handle", "ordo.bank.v1.Credit", at[4], at[4]),
		spanLine(t, trace, "a6", "ordo.continue", "", at[5], at[5]),
		// After the answer: the forgets and their acknowledgements.
		spanLine(t, trace, "a7", "ordo.handle", "ordo.bank.v1.Forget", at[6]+ms(1), at[6]+ms(1)),
		spanLine(t, trace, "a8", "ordo.continue", "", at[6]+ms(5), at[6]+ms(5)),
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
	lines = append(lines, rejected[:5]...) // no credit
	retried := transferSpans(t, "t5", [6]int{1, 1, 1, 1, 1, 1})
	lines = append(lines, append(retried, retried[2])...) // the debit handled twice
	lines = append(lines, spanLine(t, "t6", "0000000000000000", "ordo.call", "ordo.bank.v1.GetBalance", 0, time.Millisecond))

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	code, out, stderr := runCLI(t, ctx, "latency", "--trace", writeLines(t, lines), "--output", "json")
	require.Equal(t, exitOK, code, stderr)
	var rep latencyReport
	require.NoError(t, json.Unmarshal([]byte(out), &rep))
	require.Equal(t, 3, rep.Transfers)
	require.Equal(t, 2, rep.LeftOut)
	want := []struct {
		name           string
		p50, p90, mean float64
	}{
		{"client -> saga", 2, 3, 2},
		{"saga -> debit", 2, 2, 2},
		{"debit -> durable", 20, 30, 20},
		{"ack -> credit", 2, 3, 2},
		{"credit -> ack", 20, 30, 20},
		{"outcome -> client", 4, 6, 4},
		{"total", 48, 62, 50}, // 40, 48 and 62
	}
	require.Len(t, rep.Hops, len(want))
	for i, w := range want {
		h := rep.Hops[i]
		require.Equal(t, w.name, h.Name)
		require.Equal(t, 3, h.N, h.Name)
		require.Equal(t, w.p50, h.P50, h.Name)
		require.Equal(t, w.p90, h.P90, h.Name)
		require.InDelta(t, w.mean, h.Mean, 0.001, h.Name)
	}
	require.Equal(t, 5, rep.Saves.N) // every traced Save, left-out transfers' too
	require.Equal(t, 10.0, rep.Saves.P50)

	code, out, stderr = runCLI(t, ctx, "latency", "--trace", writeLines(t, lines))
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, out, "3 traced transfers broken down (2 left out")
	require.Regexp(t, `debit -> durable\s+20\.00\s+30\.00\s+20\.00`, out)
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
}
