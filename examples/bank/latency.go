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
  saga -> debit           the saga's debit reaches the source account (in memory)
  debit -> durable        the debit, with the saga's start, is written: the wait
                          for the Save in flight, then its own Save
  ack -> credit           the credit reaches the destination account (a node hop
                          when it lives elsewhere)
  credit -> ack           the credit is written (Save wait and Save) and its
                          acknowledgement reaches the saga
  outcome -> client       the saga's answer reaches the client

It prints each hop's median, 90th percentile and mean, their sum's, and the
duration of the store's Saves (ordo.store.save) over all traced spans. Trace
more transfers with --trace-ratio; transfers that were rejected, retried or
whose spans are incomplete are counted and left out.

Then, for the transfers whose debit and credit Saves were traced (ordo.save,
the batcher's Save carrying the write), it splits the two durable hops:

  debit: to its Save      the debit is handled and its write waits for the
                          Save in flight (writes made meanwhile go together)
  debit: its Save         the Save carrying the debit and the saga's start
  debit: Save -> ack      the account learns the write is durable and its
                          acknowledgement reaches the saga (mailboxes)
  credit: ...             the same for the credit; its acknowledgement
                          crosses back to the saga's node`,
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
var hopNames = []string{"client -> saga", "saga -> debit", "debit -> durable", "ack -> credit", "credit -> ack", "outcome -> client"}

// The parts of the two durable hops, in order: each step's write waiting
// for its Save, the Save, and its acknowledgement reaching the saga.
var durableNames = []string{"debit: to its Save", "debit: its Save", "debit: Save -> ack",
	"credit: to its Save", "credit: its Save", "credit: Save -> ack"}

// latencyReport is the breakdown.
type latencyReport struct {
	Transfers int        `json:"transfers"` // broken down
	LeftOut   int        `json:"left_out"`  // traced transfers left out
	Hops      []hopStats `json:"hops"`      // in order, then "total"
	Saves     hopStats   `json:"saves"`     // every traced ordo.store.save
	// Durable splits "debit -> durable" and "credit -> ack" (durableNames)
	// over the transfers whose two Saves were traced (DurableTransfers).
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
// SubmitTransfer (a root span), the saga's handling of it, the debit's and
// the credit's handling, and the saga's continuations that took their
// acknowledgements.
func breakDown(spans []span) latencyReport {
	byTrace := map[string][]*span{}
	var saves []time.Duration
	// saveOf maps a run's span to the Save (ordo.save) that carried its
	// write: the Save's parent, or one of its links.
	saveOf := map[string]*span{}
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
	var rep latencyReport
	hops := make([][]time.Duration, len(hopNames)+1)
	durable := make([][]time.Duration, len(durableNames))
	for _, ts := range byTrace {
		var root *span
		for _, s := range ts {
			if s.Name == "ordo.call" && strings.Trim(s.Parent.SpanID, "0") == "" && strings.HasSuffix(s.attr("ordo.message"), ".SubmitTransfer") {
				root = s
			}
		}
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
				durable[i] = append(durable[i], x)
			}
		}
	}
	for i, name := range hopNames {
		rep.Hops = append(rep.Hops, statsOf(name, hops[i]))
	}
	rep.Hops = append(rep.Hops, statsOf("total", hops[len(hopNames)]))
	rep.Saves = statsOf("store Save", saves)
	for i, name := range durableNames {
		rep.Durable = append(rep.Durable, statsOf(name, durable[i]))
	}
	return rep
}

// transferHops returns the hops of the transfer whose client call is
// root, or false when its trace does not show one first attempt of each
// step (a rejection has no credit; a retried step has two). parts splits
// its two durable hops (durableNames) when saveOf holds the Saves of both
// steps' writes, and is nil otherwise.
func transferHops(root *span, ts []*span, saveOf map[string]*span) (hops, parts []time.Duration, ok bool) {
	slices.SortFunc(ts, func(a, b *span) int { return a.StartTime.Compare(b.StartTime) })
	handled := func(suffix string) []*span {
		var out []*span
		for _, s := range ts {
			if s.Name == "ordo.handle" && strings.HasSuffix(s.attr("ordo.message"), suffix) {
				out = append(out, s)
			}
		}
		return out
	}
	submits, debits, credits := handled(".SubmitTransfer"), handled(".Debit"), handled(".Credit")
	if len(submits) != 1 || len(debits) != 1 || len(credits) != 1 {
		return nil, nil, false
	}
	submit, debit, credit := submits[0].StartTime, debits[0].StartTime, credits[0].StartTime
	end := root.EndTime
	if !(root.StartTime.Compare(submit) <= 0 && submit.Compare(debit) <= 0 && debit.Before(credit) && credit.Before(end)) {
		return nil, nil, false
	}
	// The debit's acknowledgement is the saga's last continuation before
	// the credit is handled; the credit's, its first after.
	var debitAck, creditAck time.Time
	for _, s := range ts {
		if s.Name != "ordo.continue" {
			continue
		}
		switch t := s.StartTime; {
		case t.After(debit) && t.Before(credit):
			debitAck = t
		case t.After(credit) && !t.After(end) && creditAck.IsZero():
			creditAck = t
		}
	}
	if debitAck.IsZero() || creditAck.IsZero() {
		return nil, nil, false
	}
	hops = []time.Duration{submit.Sub(root.StartTime), debit.Sub(submit), debitAck.Sub(debit),
		credit.Sub(debitAck), creditAck.Sub(credit), end.Sub(creditAck)}
	// A step's Save starts after its handling started and ends before its
	// acknowledgement reaches the saga.
	split := func(handled *span, ack time.Time) []time.Duration {
		sv := saveOf[handled.SpanContext.SpanID]
		if sv == nil || sv.StartTime.Before(handled.StartTime) || sv.EndTime.After(ack) {
			return nil
		}
		return []time.Duration{sv.StartTime.Sub(handled.StartTime), sv.EndTime.Sub(sv.StartTime), ack.Sub(sv.EndTime)}
	}
	if d, c := split(debits[0], debitAck), split(credits[0], creditAck); d != nil && c != nil {
		parts = append(d, c...)
	}
	return hops, parts, true
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
		_, err := fmt.Fprintln(w, "\nno transfer's debit and credit Saves (ordo.save) were traced: the durable hops are not split")
		return err
	}
	fmt.Fprintf(w, "\nthe durable hops, split, over the %d transfers whose debit and credit Saves were traced:\n\n", r.DurableTransfers)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "part\tp50 ms\tp90 ms\tmean ms\t")
	for _, h := range r.Durable {
		fmt.Fprintf(tw, "%s\t%.2f\t%.2f\t%.2f\t\n", h.Name, h.P50, h.P90, h.Mean)
	}
	return tw.Flush()
}
