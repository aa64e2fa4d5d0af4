package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
)

// newLatencyCmd is `bank latency`: the per-hop breakdown of traced
// transfers' latency, from the spans `bank demo --trace=FILE` writes.
func newLatencyCmd() *cobra.Command {
	var (
		path   string
		output string
	)
	cmd := &cobra.Command{
		Use:   "latency --trace FILE [--output table|json]",
		Short: "Break the latency of traced transfers down by hop, from the spans of bank demo --trace=FILE",
		Long: `latency reads the spans that bank demo --trace=FILE wrote (one JSON object per
line) and, for every traced transfer that completed on its first attempt, splits
the client's call into its hops, in the order they happen:

  client -> saga          the client's call reaches the saga (its node's transport)
  debit and hold          the saga sends the debit to the source account (in
                          memory) and the hold to the destination (a node hop
                          when it lives elsewhere) at once; each account writes
                          its step and answers, and the later answer reaches
                          the saga
  -> release              the release reaches the destination
  release -> ack          the release is applied (written behind, answered at
                          once) and its answer reaches the saga
  outcome -> client       the saga's answer reaches the client

It prints each hop's median, 90th percentile and mean, their sum's, and the
duration of the store's Saves (ordo.store.save) over all traced spans. Trace
more transfers with --trace-ratio; transfers that were rejected, retried or
whose spans are incomplete are counted and left out.

Then, for the transfers whose debit and hold Saves were traced (ordo.save, the
batcher's Save carrying the write), it splits debit and hold into its two
parallel branches. The hop is the later of the two; the debit's branch starts
with its in-memory hand-over to the source, not shown:

  debit: to its Save      the debit is handled and its write waits for the
                          Save in flight (writes made meanwhile go together)
  debit: its Save         the Save carrying the debit and the saga's start
  debit: Save -> ack      the account learns the write is durable and its
                          answer reaches the saga (mailboxes)
  hold: to the account    the hold reaches the destination
  hold: ...               the same for the hold; its answer crosses back to
                          the saga's node`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if path == "" {
				return usagef("--trace is required")
			}
			if output != "table" && output != "json" {
				return usagef("--output %q: want table or json", output)
			}
			f, err := os.Open(path)
			if err != nil {
				return fmt.Errorf("reading the spans: %w", err)
			}
			defer f.Close()
			spans, err := readSpans(f)
			if err != nil {
				return fmt.Errorf("reading the spans of %s: %w", path, err)
			}
			rep := breakDown(spans)
			if rep.Transfers == 0 {
				return fmt.Errorf("%s holds no traced transfer that completed on its first attempt (%d left out): trace some with bank demo --trace=FILE --trace-ratio R",
					path, rep.LeftOut)
			}
			if output == "json" {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(rep)
			}
			return rep.print(cmd.OutOrStdout())
		},
	}
	cmd.Flags().StringVar(&path, "trace", "", "the spans file bank demo --trace=FILE wrote")
	cmd.Flags().StringVar(&output, "output", "table", "table or json")
	return cmd
}

// span is the part of a span, as the OpenTelemetry stdout exporter
// writes it, that the breakdown needs.
type span struct {
	Name        string
	SpanContext struct{ TraceID, SpanID string }
	Parent      struct{ SpanID string }
	Links       []struct{ SpanContext struct{ SpanID string } }
	StartTime   time.Time
	EndTime     time.Time
	Attributes  []struct {
		Key   string
		Value struct{ Value any }
	}
}

func (s *span) attr(key string) string {
	for _, a := range s.Attributes {
		if a.Key == key {
			return fmt.Sprint(a.Value.Value)
		}
	}
	return ""
}

// maxSpanLine bounds one line of the spans file.
const maxSpanLine = 1 << 20

// readSpans decodes one span per line; blank lines are skipped.
func readSpans(r io.Reader) ([]span, error) {
	var out []span
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, maxSpanLine)
	for n := 1; sc.Scan(); n++ {
		line := sc.Bytes()
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var s span
		if err := json.Unmarshal(line, &s); err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		if s.SpanContext.TraceID == "" || s.StartTime.IsZero() || s.EndTime.Before(s.StartTime) {
			return nil, fmt.Errorf("line %d: not a span (a trace ID, a start and an end not before it)", n)
		}
		out = append(out, s)
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, fmt.Errorf("a line is longer than %d bytes", maxSpanLine)
		}
		return nil, err
	}
	return out, nil
}

// The hops of a transfer, in order.
var hopNames = []string{"client -> saga", "debit and hold", "-> release", "release -> ack", "outcome -> client"}

// The parts of the two parallel branches of "debit and hold", in order:
// the debit's write waiting for its Save, the Save, and its answer
// reaching the saga (from the Debit's handling: its in-memory hand-over is
// left out), then the hold's way to the destination and the same three.
var branchNames = []string{"debit: to its Save", "debit: its Save", "debit: Save -> ack",
	"hold: to the account", "hold: to its Save", "hold: its Save", "hold: Save -> ack"}

// latencyReport is the breakdown.
type latencyReport struct {
	Transfers int        `json:"transfers"` // broken down
	LeftOut   int        `json:"left_out"`  // traced transfers left out
	Hops      []hopStats `json:"hops"`      // in order, then "total"
	Saves     hopStats   `json:"saves"`     // every traced ordo.store.save
	// Durable splits "debit and hold" into its branches (branchNames) over
	// the transfers whose debit and hold Saves were traced
	// (DurableTransfers).
	DurableTransfers int        `json:"durable_transfers"`
	Durable          []hopStats `json:"durable"`
}

// hopStats are one hop's durations, in milliseconds.
type hopStats struct {
	Name string  `json:"name"`
	N    int     `json:"n"`
	P50  float64 `json:"p50_ms"`
	P90  float64 `json:"p90_ms"`
	Mean float64 `json:"mean_ms"`
}

func statsOf(name string, d []time.Duration) hopStats {
	h := hopStats{Name: name, N: len(d)}
	if len(d) == 0 {
		return h
	}
	slices.Sort(d)
	ms := func(x time.Duration) float64 { return math.Round(float64(x)/1e3) / 1e3 }
	var sum time.Duration
	for _, x := range d {
		sum += x
	}
	rank := func(q float64) time.Duration { return d[int(math.Ceil(q*float64(len(d))))-1] } // nearest rank
	h.P50, h.P90, h.Mean = ms(rank(0.5)), ms(rank(0.9)), ms(sum/time.Duration(len(d)))
	return h
}

// breakDown finds each trace's transfer: the client's call of
// SubmitTransfer (a root span), the saga's handling of it, the handling of
// the debit, the hold and the release, and the saga's continuations that
// took their answers.
func breakDown(spans []span) latencyReport {
	byTrace, saveOf, saves := indexSpans(spans)
	var rep latencyReport
	hops := make([][]time.Duration, len(hopNames)+1)
	branches := make([][]time.Duration, len(branchNames))
	for _, ts := range byTrace {
		root := transferRoot(ts)
		if root == nil {
			continue
		}
		d, parts, ok := transferHops(root, ts, saveOf)
		if !ok {
			rep.LeftOut++
			continue
		}
		rep.Transfers++
		var total time.Duration
		for i, x := range d {
			hops[i] = append(hops[i], x)
			total += x
		}
		hops[len(hopNames)] = append(hops[len(hopNames)], total)
		if parts != nil {
			rep.DurableTransfers++
			for i, x := range parts {
				branches[i] = append(branches[i], x)
			}
		}
	}
	for i, name := range hopNames {
		rep.Hops = append(rep.Hops, statsOf(name, hops[i]))
	}
	rep.Hops = append(rep.Hops, statsOf("total", hops[len(hopNames)]))
	rep.Saves = statsOf("store Save", saves)
	for i, name := range branchNames {
		rep.Durable = append(rep.Durable, statsOf(name, branches[i]))
	}
	return rep
}

// indexSpans groups spans by trace, maps a run's span to the Save
// (ordo.save) that carried its write (the Save's parent, or one of its
// links), and lists the store's Saves' durations.
func indexSpans(spans []span) (byTrace map[string][]*span, saveOf map[string]*span, saves []time.Duration) {
	byTrace, saveOf = map[string][]*span{}, map[string]*span{}
	for i := range spans {
		s := &spans[i]
		byTrace[s.SpanContext.TraceID] = append(byTrace[s.SpanContext.TraceID], s)
		switch s.Name {
		case "ordo.store.save":
			saves = append(saves, s.EndTime.Sub(s.StartTime))
		case "ordo.save":
			saveOf[s.Parent.SpanID] = s
			for _, l := range s.Links {
				saveOf[l.SpanContext.SpanID] = s
			}
		}
	}
	return byTrace, saveOf, saves
}

// transferRoot is the client's call of SubmitTransfer among a trace's
// spans, or nil.
func transferRoot(ts []*span) *span {
	for _, s := range ts {
		if s.Name == "ordo.call" && strings.Trim(s.Parent.SpanID, "0") == "" && strings.HasSuffix(s.attr("ordo.message"), ".SubmitTransfer") {
			return s
		}
	}
	return nil
}

// transferHops returns the hops of the transfer whose client call is
// root, or false when its trace does not show one first attempt of each
// step in order (a rejection has no release; a retried step has two).
// parts splits "debit and hold" into its branches (branchNames) when
// saveOf holds the Saves of the debit's and the hold's writes, and is nil
// otherwise.
func transferHops(root *span, ts []*span, saveOf map[string]*span) (hops, parts []time.Duration, ok bool) {
	// one is the span of that name whose attribute key matches, if there
	// is exactly one.
	one := func(name, key string, match func(string) bool) *span {
		var found *span
		for _, s := range ts {
			if s.Name == name && match(s.attr(key)) {
				if found != nil {
					return nil
				}
				found = s
			}
		}
		return found
	}
	handled := func(message string) *span {
		return one("ordo.handle", "ordo.message", func(m string) bool { return strings.HasSuffix(m, "."+message) })
	}
	answered := func(step string) *span {
		return one("ordo.continue", "ordo.request_id", func(id string) bool { return stepOf(id) == step })
	}
	submit, debit, hold, release := handled("SubmitTransfer"), handled("Debit"), handled("Hold"), handled("Release")
	debitAck, holdAck, releaseAck := answered("debit"), answered("hold"), answered("release")
	for _, s := range []*span{submit, debit, hold, release, debitAck, holdAck, releaseAck} {
		if s == nil {
			return nil, nil, false
		}
	}
	// The saga releases once both answers are in: after the later.
	both := debitAck
	if holdAck.StartTime.After(both.StartTime) {
		both = holdAck
	}
	for _, before := range [][2]time.Time{
		{root.StartTime, submit.StartTime},
		{submit.StartTime, debit.StartTime}, {debit.StartTime, debitAck.StartTime},
		{submit.StartTime, hold.StartTime}, {hold.StartTime, holdAck.StartTime},
		{both.StartTime, release.StartTime}, {release.StartTime, releaseAck.StartTime},
		{releaseAck.StartTime, root.EndTime},
	} {
		if before[1].Before(before[0]) {
			return nil, nil, false
		}
	}
	hops = []time.Duration{submit.StartTime.Sub(root.StartTime), both.StartTime.Sub(submit.StartTime),
		release.StartTime.Sub(both.StartTime), releaseAck.StartTime.Sub(release.StartTime), root.EndTime.Sub(releaseAck.StartTime)}
	// A step's Save starts after its handling started and ends before its
	// answer reaches the saga.
	split := func(handled, ack *span) []time.Duration {
		sv := saveOf[handled.SpanContext.SpanID]
		if sv == nil || sv.StartTime.Before(handled.StartTime) || sv.EndTime.After(ack.StartTime) {
			return nil
		}
		return []time.Duration{sv.StartTime.Sub(handled.StartTime), sv.EndTime.Sub(sv.StartTime), ack.StartTime.Sub(sv.EndTime)}
	}
	if d, h := split(debit, debitAck), split(hold, holdAck); d != nil && h != nil {
		parts = append(append(d, hold.StartTime.Sub(submit.StartTime)), h...)
	}
	return hops, parts, true
}

// stepOf is the saga's step that a request ID names: what follows its
// last colon, up to a dash (a hold's ends with the saga's activation,
// ID:hold-ACTIVATION).
func stepOf(requestID string) string {
	i := strings.LastIndexByte(requestID, ':')
	if i < 0 {
		return ""
	}
	step, _, _ := strings.Cut(requestID[i+1:], "-")
	return step
}

func (r latencyReport) print(w io.Writer) error {
	fmt.Fprintf(w, "%d traced transfers broken down (%d left out: rejected, retried or incomplete)\n\n", r.Transfers, r.LeftOut)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "hop\tp50 ms\tp90 ms\tmean ms\t")
	for _, h := range append(r.Hops, r.Saves) {
		fmt.Fprintf(tw, "%s\t%.2f\t%.2f\t%.2f\t\n", h.Name, h.P50, h.P90, h.Mean)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if _, err := fmt.Fprintf(w, "\nstore Save: the %d traced Saves (ordo.store.save), while which the node's next writes queue\n", r.Saves.N); err != nil {
		return err
	}
	if r.DurableTransfers == 0 {
		_, err := fmt.Fprintln(w, "\nno transfer's debit and hold Saves (ordo.save) were traced: debit and hold is not split")
		return err
	}
	fmt.Fprintf(w, "\ndebit and hold, split into its two parallel branches, over the %d transfers whose debit and hold Saves were traced\n", r.DurableTransfers)
	fmt.Fprint(w, "(the hop is the later branch; the debit's starts with its in-memory hand-over, not shown):\n\n")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "part\tp50 ms\tp90 ms\tmean ms\t")
	for _, h := range r.Durable {
		fmt.Fprintf(tw, "%s\t%.2f\t%.2f\t%.2f\t\n", h.Name, h.P50, h.P90, h.Mean)
	}
	return tw.Flush()
}
