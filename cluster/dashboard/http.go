package dashboard

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/ordo-actors/ordo/actors"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

//go:embed assets
var assets embed.FS

// Handler returns the dashboard's HTTP handler (routes in the package
// documentation). Mount it at the root of the admin endpoint.
func (h *Hub) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", asset("assets/index.html", "text/html; charset=utf-8"))
	mux.HandleFunc("GET /dashboard/app.js", asset("assets/app.js", "text/javascript; charset=utf-8"))
	mux.HandleFunc("GET /dashboard/style.css", asset("assets/style.css", "text/css; charset=utf-8"))
	mux.HandleFunc("GET /dashboard/events", h.serveEvents)
	mux.HandleFunc("GET /dashboard/api/state", h.serveState)
	mux.HandleFunc("GET /dashboard/api/node", h.serveNode)
	mux.HandleFunc("GET /dashboard/api/shards/{shard}", h.serveShard)
	mux.HandleFunc("GET /dashboard/api/local/shards/{shard}", h.serveLocalShard)
	mux.HandleFunc("GET /dashboard/api/entities/{kind}/{id...}", h.serveEntityAtOwner)
	mux.HandleFunc("GET /entities/{kind}/{id...}", h.serveEntity)
	return mux
}

func asset(name, contentType string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		b, err := assets.ReadFile(name)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", contentType)
		w.Header().Set("Cache-Control", "no-cache")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		_, _ = w.Write(b)
	}
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

func writeError(w http.ResponseWriter, code int, err error) {
	writeJSON(w, code, map[string]string{"error": err.Error()})
}

// Frame is what the page receives: members and shards in full, samples
// and events new since the previous frame (all of them when Reset).
type Frame struct {
	Reset      bool                  `json:"reset,omitempty"`
	Time       int64                 `json:"t"`
	Self       string                `json:"self"`
	Prefix     string                `json:"prefix,omitempty"`
	IntervalMS int64                 `json:"interval_ms"`
	Members    []Member              `json:"members"`
	Shards     []ShardCell           `json:"shards"`
	Nodes      map[string]*NodeFrame `json:"nodes"`
	Events     []Event               `json:"events,omitempty"`
}

// NodeFrame is one node's numbers in a Frame.
type NodeFrame struct {
	// Reset: drop the node's earlier samples (it restarted).
	Reset          bool           `json:"reset,omitempty"`
	Reachable      bool           `json:"reachable"`
	Error          string         `json:"error,omitempty"`
	Totals         Totals         `json:"totals"`
	Active         int            `json:"active"`
	ActivePerShard map[uint32]int `json:"active_per_shard,omitempty"`
	Samples        []Sample       `json:"samples,omitempty"`
}

// subscriber is one attached page: what it was last sent.
type subscriber struct {
	notify chan struct{} // cap 1
	sent   bool
	nodes  map[string][2]uint64 // node → generation, last sample number
	events uint64
}

func (s *subscriber) wake() {
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

func (h *Hub) subscribe() *subscriber {
	s := &subscriber{notify: make(chan struct{}, 1), nodes: map[string][2]uint64{}}
	h.mu.Lock()
	h.subs[s] = struct{}{}
	h.mu.Unlock()
	h.watchers.Add(1)
	select {
	case h.attach <- struct{}{}:
	default:
	}
	return s
}

func (h *Hub) unsubscribe(s *subscriber) {
	h.mu.Lock()
	delete(h.subs, s)
	h.mu.Unlock()
	h.watchers.Add(-1)
}

// frameLocked builds s's next frame and advances its cursors. h.mu is
// held.
func (h *Hub) frameLocked(s *subscriber) Frame {
	f := Frame{Reset: !s.sent, Time: h.frameAt.UnixMilli(), Prefix: h.prefix,
		IntervalMS: h.cfg.Interval.Milliseconds(), Members: h.members, Shards: h.shards,
		Nodes: map[string]*NodeFrame{}}
	if h.self != nil {
		f.Self = h.self.id
	}
	s.sent = true
	for id, nd := range h.nodes {
		nf := &NodeFrame{Reachable: nd.reachable, Error: nd.err, Totals: nd.report.Totals,
			Active: nd.report.Active, ActivePerShard: nd.report.ActivePerShard}
		cur, seen := s.nodes[id]
		if !seen || cur[0] != nd.gen {
			nf.Reset, cur = true, [2]uint64{nd.gen, 0}
		}
		nf.Samples = nd.samples.since(cur[1])
		s.nodes[id] = [2]uint64{nd.gen, nd.samples.last()}
		f.Nodes[id] = nf
	}
	f.Events = h.timeline.since(s.events)
	s.events = h.timeline.last()
	return f
}

// serveEvents streams Frames as Server-Sent Events: one at once, then one
// whenever the view changed (at most four per Interval), until the page
// goes away or the hub stops.
func (h *Hub) serveEvents(w http.ResponseWriter, r *http.Request) {
	select {
	case <-h.done:
		http.Error(w, "dashboard: the node has stopped", http.StatusServiceUnavailable)
		return
	default:
	}
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	if _, err := io.WriteString(w, "retry: 2000\n\n"); err != nil {
		return
	}
	s := h.subscribe()
	defer h.unsubscribe(s)
	h.aggregate(r.Context(), false) // a first frame from the node's own views, at once
	for {
		select {
		case <-r.Context().Done():
			return
		case <-h.done:
			return
		case <-s.notify:
		}
		h.mu.Lock()
		f := h.frameLocked(s)
		h.mu.Unlock()
		b, err := json.Marshal(f)
		if err != nil {
			h.log.Error("dashboard: encoding a frame", "err", err)
			return
		}
		if _, err := fmt.Fprintf(w, "data: %s\n\n", b); err != nil {
			return
		}
		if err := rc.Flush(); err != nil {
			return
		}
	}
}

// serveState answers one full Frame, the other nodes read at once.
func (h *Hub) serveState(w http.ResponseWriter, r *http.Request) {
	h.aggregate(r.Context(), true)
	h.mu.Lock()
	f := h.frameLocked(&subscriber{nodes: map[string][2]uint64{}})
	h.mu.Unlock()
	writeJSON(w, http.StatusOK, f)
}

// serveNode answers this node's NodeReport with the samples numbered
// after ?since= and the Local events numbered after ?events=.
func (h *Hub) serveNode(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	since, err1 := parseSeq(q.Get("since"))
	evs, err2 := parseSeq(q.Get("events"))
	if err := errors.Join(err1, err2); err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	local, detail, c := h.src.Local(), h.src.Detail(), h.src.Counters()
	h.mu.Lock()
	rep := h.reportLocked(local, detail, c)
	if h.self != nil {
		rep.Samples = h.self.samples.since(since)
	}
	rep.Events = h.events.since(evs)
	rep.EventSeq = h.events.last()
	h.mu.Unlock()
	writeJSON(w, http.StatusOK, rep)
}

func parseSeq(s string) (uint64, error) {
	if s == "" {
		return 0, nil
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("dashboard: bad sequence number %q", s)
	}
	return n, nil
}

// fetchReport reads a peer's NodeReport.
func (h *Hub) fetchReport(ctx context.Context, admin string, since, events uint64) (NodeReport, error) {
	var rep NodeReport
	err := h.get(ctx, admin, fmt.Sprintf("/dashboard/api/node?since=%d&events=%d", since, events), &rep)
	return rep, err
}

// get reads JSON from a peer's admin endpoint.
func (h *Hub) get(ctx context.Context, admin, path string, v any) error {
	ctx, cancel := context.WithTimeout(ctx, h.cfg.PeerTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+admin+path, nil)
	if err != nil {
		return err
	}
	if h.cfg.Token != "" {
		req.Header.Set("Authorization", "Bearer "+h.cfg.Token)
	}
	resp, err := h.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		var e struct{ Error string }
		if json.Unmarshal(body, &e) == nil && e.Error != "" {
			return fmt.Errorf("%s: %s", resp.Status, e.Error)
		}
		return fmt.Errorf("%s", resp.Status)
	}
	return json.Unmarshal(body, v)
}

// ShardEntities lists a shard's active entities by kind.
type ShardEntities struct {
	Shard uint32 `json:"shard"`
	// Owner and Epoch are the shard's owner in the routing table.
	Owner string `json:"owner,omitempty"`
	Epoch int64  `json:"epoch,omitempty"`
	// Node is the node that listed its active entities.
	Node string `json:"node"`
	// Kinds maps each kind to the IDs of its active entities, sorted; at
	// most maxListed in all (Truncated then), Count in all.
	Kinds     map[string][]string `json:"kinds"`
	Count     int                 `json:"count"`
	Truncated bool                `json:"truncated,omitempty"`
	// Error says why the owner could not be asked (the list is then this
	// node's).
	Error string `json:"error,omitempty"`
}

const maxListed = 500

func (h *Hub) shardParam(w http.ResponseWriter, r *http.Request) (uint32, bool) {
	n, err := strconv.ParseUint(r.PathValue("shard"), 10, 32)
	if err != nil || n >= uint64(h.src.Local().Shards) {
		writeError(w, http.StatusBadRequest, fmt.Errorf("dashboard: no shard %q", r.PathValue("shard")))
		return 0, false
	}
	return uint32(n), true
}

// serveLocalShard lists the shard's entities active on this node.
func (h *Hub) serveLocalShard(w http.ResponseWriter, r *http.Request) {
	shard, ok := h.shardParam(w, r)
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, h.localShard(shard))
}

func (h *Hub) localShard(shard uint32) ShardEntities {
	out := ShardEntities{Shard: shard, Node: h.src.Local().ID, Kinds: map[string][]string{}}
	if o, ok := h.src.View().Owners[shard]; ok {
		out.Owner, out.Epoch = o.Node, o.Epoch
	}
	refs := h.src.ActiveIn(shard)
	out.Count = len(refs)
	for i, ref := range refs {
		if i == maxListed {
			out.Truncated = true
			break
		}
		out.Kinds[ref.Kind] = append(out.Kinds[ref.Kind], ref.ID)
	}
	return out
}

// serveShard lists the shard's active entities as its owner knows them.
func (h *Hub) serveShard(w http.ResponseWriter, r *http.Request) {
	shard, ok := h.shardParam(w, r)
	if !ok {
		return
	}
	owner, admin := h.ownerOf(shard)
	if admin == "" {
		out := h.localShard(shard)
		if owner != "" && owner != out.Node {
			out.Error = fmt.Sprintf("the admin address of %s is not known", owner)
		}
		writeJSON(w, http.StatusOK, out)
		return
	}
	var out ShardEntities
	if err := h.get(r.Context(), admin, fmt.Sprintf("/dashboard/api/local/shards/%d", shard), &out); err != nil {
		out = h.localShard(shard)
		out.Error = fmt.Sprintf("asking %s: %v", owner, err)
	}
	writeJSON(w, http.StatusOK, out)
}

// ownerOf returns the owner of shard and, when it is another node, the
// admin address it gossips.
func (h *Hub) ownerOf(shard uint32) (owner, admin string) {
	view := h.src.View()
	o, ok := view.Owners[shard]
	if !ok {
		return "", ""
	}
	if o.Node == h.src.Local().ID {
		return o.Node, ""
	}
	for _, g := range view.Gossip {
		if g.ID == o.Node && g.AdminAddr != "" {
			return o.Node, g.AdminAddr
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if k := h.known[o.Node]; k != nil {
		return o.Node, k.admin
	}
	return o.Node, ""
}

// Entity is the entity inspector's answer (GET /entities/{kind}/{id}).
type Entity struct {
	Kind string `json:"kind"`
	ID   string `json:"id"`
	// Shard is the entity's shard; Owner and Epoch its owner and fencing
	// epoch in the routing table (absent while the shard is free).
	Shard uint32 `json:"shard"`
	Owner string `json:"owner,omitempty"`
	Epoch int64  `json:"epoch,omitempty"`
	// Node is the node that answered; Active whether the entity is active
	// on it.
	Node   string `json:"node"`
	Active bool   `json:"active"`
	// Record is the entity's durable record.
	Record EntityRecord `json:"record"`
	// Runtime is, when the entity is active on Node, its in-memory state
	// there: what it waits for.
	Runtime *actors.Runtime `json:"runtime,omitempty"`
	// Error says why the owner could not be asked
	// (/dashboard/api/entities only: the answer is then this node's).
	Error string `json:"error,omitempty"`
}

// EntityRecord is an entity's durable record.
type EntityRecord struct {
	// Found is false when the entity was never saved (State is then the
	// kind's fresh state).
	Found bool `json:"found"`
	// Seq is the entity's write sequence number; Epoch the fencing epoch it
	// was written under.
	Seq   uint64 `json:"seq"`
	Epoch int64  `json:"epoch,omitempty"`
	// Size is the record's size in bytes, StateSize its state's.
	Size      int `json:"size"`
	StateSize int `json:"state_size"`
	// Recent is the number of recent requests kept for deduplication.
	Recent int `json:"recent_requests"`
	// StateType is the state's protobuf message name; State the state in
	// protojson.
	StateType string          `json:"state_type"`
	State     json.RawMessage `json:"state"`
}

var stateJSON = protojson.MarshalOptions{EmitUnpopulated: true}

// inspect describes kind/id as this node sees it. code is the HTTP status
// of a failure.
func (h *Hub) inspect(ctx context.Context, kind, id string) (Entity, int, error) {
	ref, err := actors.NewRef(kind, id)
	if err != nil {
		return Entity{}, http.StatusBadRequest, err
	}
	local := h.src.Local()
	if !local.Up || local.Shards == 0 {
		return Entity{}, http.StatusServiceUnavailable, errors.New("dashboard: the node is not running")
	}
	e := Entity{Kind: kind, ID: id, Shard: actors.ShardOf(ref, local.Shards), Node: local.ID}
	if o, ok := h.src.View().Owners[e.Shard]; ok {
		e.Owner, e.Epoch = o.Node, o.Epoch
	}
	e.Active = h.src.IsActive(ref)
	if e.Active {
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		if rt, err := h.src.Runtime(rctx, ref); err == nil {
			e.Runtime = &rt
		}
		cancel()
	}
	rec, err := h.src.Record(ctx, ref)
	switch {
	case errors.Is(err, actors.ErrUnknownKind):
		return Entity{}, http.StatusNotFound, err
	case errors.Is(err, actors.ErrBadRequest):
		return Entity{}, http.StatusBadRequest, err
	case err != nil:
		return Entity{}, http.StatusServiceUnavailable, err
	}
	state, err := stateJSON.Marshal(rec.State)
	if err != nil {
		return Entity{}, http.StatusInternalServerError, fmt.Errorf("dashboard: encoding the state of %s: %w", ref, err)
	}
	e.Record = EntityRecord{Found: rec.Found, Seq: rec.Seq, Epoch: rec.Epoch, Size: rec.Size, StateSize: rec.StateSize,
		Recent: rec.Recent, StateType: string(proto.MessageName(rec.State)), State: state}
	return e, http.StatusOK, nil
}

// serveEntity is the entity inspector, answered by this node.
func (h *Hub) serveEntity(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	e, code, err := h.inspect(ctx, r.PathValue("kind"), r.PathValue("id"))
	if err != nil {
		writeError(w, code, err)
		return
	}
	writeJSON(w, http.StatusOK, e)
}

// serveEntityAtOwner is the entity inspector, asked of the entity's
// owner (so that Active says whether it is active where it lives); this
// node answers when the owner cannot be asked.
func (h *Hub) serveEntityAtOwner(w http.ResponseWriter, r *http.Request) {
	kind, id := r.PathValue("kind"), r.PathValue("id")
	ref, err := actors.NewRef(kind, id)
	if err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	var remoteErr string
	if shards := h.src.Local().Shards; shards > 0 {
		switch owner, admin := h.ownerOf(actors.ShardOf(ref, shards)); {
		case admin != "":
			var e Entity
			err := h.get(r.Context(), admin, "/entities/"+url.PathEscape(kind)+"/"+url.PathEscape(id), &e)
			if err == nil {
				writeJSON(w, http.StatusOK, e)
				return
			}
			remoteErr = fmt.Sprintf("asking %s: %v", owner, err)
		case owner != "" && owner != h.src.Local().ID:
			remoteErr = fmt.Sprintf("the admin address of %s is not known", owner)
		}
	}
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	e, code, err := h.inspect(ctx, kind, id)
	if err != nil {
		writeError(w, code, err)
		return
	}
	e.Error = remoteErr
	writeJSON(w, http.StatusOK, e)
}
