package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// testSpan is one synthetic span: id is its span ID, attrs its string
// attributes, start and end its times after t0, links the span IDs it
// links to.
type testSpan struct {
	trace, id, parent, name string
	attrs                   map[string]string
	start, end              time.Duration
	links                   []string
}

// spanLines are spans as the stdout exporter writes them.
func spanLines(t *testing.T, spans ...testSpan) []string {
	t.Helper()
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var out []string
	for _, sp := range spans {
		s := map[string]any{
			"Name":        sp.name,
			"SpanContext": map[string]any{"TraceID": sp.trace, "SpanID": sp.id},
			"Parent":      map[string]any{"SpanID": sp.parent},
			"StartTime":   t0.Add(sp.start),
			"EndTime":     t0.Add(sp.end),
		}
		var as []any
		for k, v := range sp.attrs {
			as = append(as, map[string]any{"Key": k, "Value": map[string]any{"Type": "STRING", "Value": v}})
		}
		if as != nil {
			s["Attributes"] = as
		}
		var ls []any
		for _, l := range sp.links {
			ls = append(ls, map[string]any{"SpanContext": map[string]any{"TraceID": "other", "SpanID": l}})
		}
		if ls != nil {
			s["Links"] = ls
		}
		b, err := json.Marshal(s)
		require.NoError(t, err)
		out = append(out, string(b))
	}
	return out
}

// timing is a synthetic transfer's, in milliseconds: the client's call
// reaches the saga after toSaga; debit is the debit's branch from there
// (its in-memory hand-over, to its Save, its Save, Save -> ack) and hold
// the hold's (to the account, to its Save, its Save, Save -> ack); the
// release is handled toRelease after the later branch's answer, answered
// after released, and the client toClient after that.
type timing struct {
	toSaga                        int
	debit, hold                   [4]int
	toRelease, released, toClient int
}

// even is a timing of 1ms everywhere.
var even = timing{1, [4]int{1, 1, 1, 1}, [4]int{1, 1, 1, 1}, 1, 1, 1}

// transferSpans are the spans of one transfer, trace, with timing d. The
// debit's write is carried by a Save of another trace that links the
// debit's run and the saga's (they share it); the hold's, by a Save that
// is its run's child. The hold's request ID names the saga's activation
// (ID:hold-1f). Each span's ID is trace-NAME.
func transferSpans(trace string, d timing) []testSpan {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	id := func(name string) string { return trace + "-" + name }
	msg := func(m, step string) map[string]string {
		return map[string]string{"ordo.message": "ordo.bank.v1." + m, "ordo.request_id": trace + "-0:" + step}
	}
	req := func(step string) map[string]string { return map[string]string{"ordo.request_id": trace + "-0:" + step} }
	submit := ms(d.toSaga)
	debit := submit + ms(d.debit[0])
	debitSave := debit + ms(d.debit[1])
	debitSaved := debitSave + ms(d.debit[2])
	debitAck := debitSaved + ms(d.debit[3])
	hold := submit + ms(d.hold[0])
	holdSave := hold + ms(d.hold[1])
	holdSaved := holdSave + ms(d.hold[2])
	holdAck := holdSaved + ms(d.hold[3])
	later := id("debit-ack")
	if holdAck > debitAck {
		later = id("hold-ack")
	}
	release := max(debitAck, holdAck) + ms(d.toRelease)
	releaseAck := release + ms(d.released)
	end := releaseAck + ms(d.toClient)
	return []testSpan{
		{trace, id("root"), "0000000000000000", "ordo.call", msg("SubmitTransfer", "submit"), 0, end, nil},
		{trace, id("saga"), id("root"), "ordo.handle", msg("SubmitTransfer", "submit"), submit, submit, nil},
		{trace, id("debit"), id("saga"), "ordo.handle", msg("Debit", "debit"), debit, debit, nil},
		{trace, id("hold-call"), id("saga"), "ordo.call", msg("Hold", "hold-1f"), submit, holdAck, nil},
		{trace, id("hold"), id("hold-call"), "ordo.handle", msg("Hold", "hold-1f"), hold, hold, nil},
		{"other", id("debit-save"), "x", "ordo.save", nil, debitSave, debitSaved, []string{id("saga"), "y", id("debit")}},
		{"other", id("debit-store"), id("debit-save"), "ordo.store.save", nil, debitSave, debitSaved, nil},
		{trace, id("hold-save"), id("hold"), "ordo.save", nil, holdSave, holdSaved, []string{"z"}},
		{trace, id("hold-store"), id("hold-save"), "ordo.store.save", nil, holdSave, holdSaved, nil},
		{trace, id("debit-ack"), id("saga"), "ordo.continue", req("debit"), debitAck, debitAck, nil},
		{trace, id("hold-ack"), id("saga"), "ordo.continue", req("hold-1f"), holdAck, holdAck, nil},
		{trace, id("release-call"), later, "ordo.call", msg("Release", "release"), release, releaseAck, nil},
		{trace, id("release"), id("release-call"), "ordo.handle", msg("Release", "release"), release, release, nil},
		{trace, id("release-ack"), later, "ordo.continue", req("release"), releaseAck, releaseAck, nil},
		// After the answer: the forgets.
		{trace, id("forget-from"), id("release-ack"), "ordo.handle", msg("Forget", "forget-from"), end + ms(1), end + ms(1), nil},
		{trace, id("forget-to"), id("release-ack"), "ordo.handle", msg("Forget", "forget-to"), end + ms(2), end + ms(2), nil},
	}
}

// without is spans without those whose IDs are trace-NAME for names.
func without(trace string, spans []testSpan, names ...string) []testSpan {
	return slices.DeleteFunc(slices.Clone(spans), func(s testSpan) bool {
		return slices.Contains(names, strings.TrimPrefix(s.id, trace+"-"))
	})
}

func writeLines(t *testing.T, lines []string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "spans.jsonl")
	require.NoError(t, os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600))
	return path
}

// Each hop is measured between the spans that bound it; a transfer
// without a release (a rejection), with a step handled twice or with its
// steps out of order is left out.
func TestLatencyBreakdown(t *testing.T) {
	var spans []testSpan
	// The hold's branch is the later (12 > 8).
	spans = append(spans, transferSpans("t1", timing{1, [4]int{1, 2, 4, 1}, [4]int{3, 1, 6, 2}, 1, 5, 2})...)
	// The debit's (21 > 15).
	spans = append(spans, transferSpans("t2", timing{3, [4]int{1, 10, 8, 2}, [4]int{4, 2, 6, 3}, 2, 4, 1})...)
	// The hold's (13 > 12).
	spans = append(spans, transferSpans("t3", timing{2, [4]int{1, 3, 6, 2}, [4]int{5, 1, 4, 3}, 3, 6, 4})...)
	spans = append(spans, without("t4", transferSpans("t4", even), "release-call", "release", "release-ack")...) // rejected
	retried := transferSpans("t5", even)
	again := retried[slices.IndexFunc(retried, func(s testSpan) bool { return s.id == "t5-hold" })] // handled twice
	again.id, again.start, again.end = "t5-hold-again", again.start+time.Millisecond, again.end+time.Millisecond
	spans = append(spans, append(retried, again)...)
	// A transfer whose hold's Save was not traced counts in the hops, not
	// in their split (the hold's branch is the later, 17 > 10).
	spans = append(spans, without("t7", transferSpans("t7", timing{2, [4]int{2, 2, 4, 2}, [4]int{3, 2, 8, 4}, 1, 3, 2}),
		"hold-save", "hold-store")...)
	// The release handled before the answers it waits for.
	early := even
	early.toRelease = -2
	spans = append(spans, transferSpans("t8", early)...)
	spans = append(spans, testSpan{"t6", "t6-root", "0000000000000000", "ordo.call",
		map[string]string{"ordo.message": "ordo.bank.v1.GetBalance"}, 0, time.Millisecond, nil})
	lines := spanLines(t, spans...)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	code, out, stderr := runCLI(t, ctx, "latency", "--trace", writeLines(t, lines), "--output", "json")
	require.Equal(t, exitOK, code, stderr)
	var rep latencyReport
	require.NoError(t, json.Unmarshal([]byte(out), &rep))
	require.Equal(t, 4, rep.Transfers)
	require.Equal(t, 3, rep.LeftOut)
	requireStats(t, 4, rep.Hops, []hopStats{
		{Name: "client -> saga", P50: 2, P90: 3, Mean: 2},       // 1, 3, 2, 2
		{Name: "debit and hold", P50: 13, P90: 21, Mean: 15.75}, // 12, 21, 13, 17
		{Name: "-> release", P50: 1, P90: 3, Mean: 1.75},        // 1, 2, 3, 1
		{Name: "release -> ack", P50: 4, P90: 6, Mean: 4.5},     // 5, 4, 6, 3
		{Name: "outcome -> client", P50: 2, P90: 4, Mean: 2.25}, // 2, 1, 4, 2
		{Name: "total", P50: 25, P90: 31, Mean: 26.25},          // 21, 31, 28, 25
	})
	// Every traced store Save, left-out transfers' too: 4, 6, 8, 6, 6, 4,
	// 4 (t7's debit) and six of 1ms.
	require.Equal(t, 13, rep.Saves.N)
	require.Equal(t, 4.0, rep.Saves.P50)
	require.Equal(t, 6.0, rep.Saves.P90)

	// debit and hold splits over the three transfers with both Saves
	// traced; the debit's parts start at its handling, after its hand-over.
	require.Equal(t, 3, rep.DurableTransfers)
	requireStats(t, 3, rep.Durable, []hopStats{
		{Name: "debit: to its Save", P50: 3, P90: 10, Mean: 5},      // 2, 10, 3
		{Name: "debit: its Save", P50: 6, P90: 8, Mean: 6},          // 4, 8, 6
		{Name: "debit: Save -> ack", P50: 2, P90: 2, Mean: 5.0 / 3}, // 1, 2, 2
		{Name: "hold: to the account", P50: 4, P90: 5, Mean: 4},     // 3, 4, 5
		{Name: "hold: to its Save", P50: 1, P90: 2, Mean: 4.0 / 3},  // 1, 2, 1
		{Name: "hold: its Save", P50: 6, P90: 6, Mean: 16.0 / 3},    // 6, 6, 4
		{Name: "hold: Save -> ack", P50: 3, P90: 3, Mean: 8.0 / 3},  // 2, 3, 3
	})

	code, out, stderr = runCLI(t, ctx, "latency", "--trace", writeLines(t, lines))
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, out, "4 traced transfers broken down (3 left out")
	require.Regexp(t, `debit and hold\s+13\.00\s+21\.00\s+15\.75`, out)
	require.Contains(t, out, "debit and hold, split into its two parallel branches, over the 3 transfers whose debit and hold Saves were traced")
	require.Regexp(t, `hold: its Save\s+6\.00\s+6\.00\s+5\.33`, out)
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
	ok := spanLines(t, transferSpans("t1", even)...)
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

// The spans bank demo --trace writes break down: each traced transfer's
// hops add up to its call, and the parts of debit and hold to its two
// branches, the later of which is the hop.
func TestLatencyOfDemoTrace(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	path := demoSpans(t, ctx, "5")
	code, out, stderr := runCLI(t, ctx, "latency", "--trace", path, "--output", "json")
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
	require.Positive(t, rep.Hops[1].Mean, "the debit and the hold take a Save each")
	// Every Save carrying a traced write is traced: each transfer's debit
	// and hold split.
	require.Equal(t, rep.Transfers, rep.DurableTransfers)

	// Each transfer, exactly, against its spans.
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	spans, err := readSpans(f)
	require.NoError(t, err)
	byTrace, saveOf, _ := indexSpans(spans)
	start := func(ts []*span, name, key, pattern string) time.Time {
		t.Helper()
		re := regexp.MustCompile(pattern)
		for _, s := range ts {
			if s.Name == name && re.MatchString(s.attr(key)) {
				return s.StartTime
			}
		}
		require.Failf(t, "a span is missing", "%s with %s matching %s", name, key, pattern)
		return time.Time{}
	}
	sumOf := func(d []time.Duration) (total time.Duration) {
		for _, x := range d {
			require.GreaterOrEqual(t, x, time.Duration(0))
			total += x
		}
		return total
	}
	roots, n := 0, 0
	for _, ts := range byTrace {
		root := transferRoot(ts)
		if root == nil {
			continue
		}
		roots++
		hops, parts, ok := transferHops(root, ts, saveOf)
		if !ok {
			continue
		}
		n++
		require.Len(t, hops, len(hopNames))
		require.Equal(t, root.EndTime.Sub(root.StartTime), sumOf(hops), "the hops add up to the call")
		require.Len(t, parts, len(branchNames))
		saga := start(ts, "ordo.handle", "ordo.message", `\.SubmitTransfer$`)
		handOver := start(ts, "ordo.handle", "ordo.message", `\.Debit$`).Sub(saga)
		debit := start(ts, "ordo.continue", "ordo.request_id", `:debit$`).Sub(saga)
		hold := start(ts, "ordo.continue", "ordo.request_id", `:hold(-[0-9a-f]+)?$`).Sub(saga)
		require.Equal(t, debit, handOver+sumOf(parts[:3]), "the debit's branch")
		require.Equal(t, hold, sumOf(parts[3:]), "the hold's branch")
		release := start(ts, "ordo.handle", "ordo.message", `\.Release$`)
		released := start(ts, "ordo.continue", "ordo.request_id", `:release$`)
		require.Equal(t, saga.Sub(root.StartTime), hops[0], "client -> saga")
		require.Equal(t, max(debit, hold), hops[1], "debit and hold is the later branch")
		require.Equal(t, release.Sub(saga.Add(hops[1])), hops[2], "-> release")
		require.Equal(t, released.Sub(release), hops[3], "release -> ack")
		require.Equal(t, root.EndTime.Sub(released), hops[4], "outcome -> client")
	}
	require.Equal(t, rep.Transfers, n)
	require.Equal(t, rep.Transfers+rep.LeftOut, roots)
}
