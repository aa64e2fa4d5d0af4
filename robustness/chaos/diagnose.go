package chaos

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/ordo-actors/ordo/examples/bank/ledger"
	"github.com/ordo-actors/ordo/robustness/history"
)

// diagnose keeps, for a run whose entities did not all answer after the
// heal, what the nodes hold of them: each node's goroutines
// (dir/diagnosis/<node>-goroutines.txt) and its entity inspector's answer
// for every account that does not answer and every transfer not final,
// with the entity's in-memory state where it is active
// (dir/diagnosis/<node>-entities.json, one JSON document per entity). It returns the directory.
func (r *runner) diagnose(ctx context.Context, dir string, accounts []string, sagas map[string]string, from map[string]string) string {
	out := filepath.Join(dir, "diagnosis")
	if err := os.MkdirAll(out, 0o755); err != nil {
		r.logf("diagnosis: %v", err)
		return ""
	}
	paths := make([]string, 0, len(accounts)+len(sagas))
	for _, a := range accounts {
		paths = append(paths, "/entities/"+ledger.Account.Name()+"/"+url.PathEscape(a))
	}
	ids := make([]string, 0, len(sagas))
	for id := range sagas {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		if tid := ledger.TransferID(from[id], id); tid != "" {
			paths = append(paths, "/entities/"+ledger.Transfer.Name()+"/"+url.PathEscape(tid))
		}
	}
	for _, n := range r.nodes {
		r.save(ctx, n.admin, "/debug/pprof/goroutine?debug=2", filepath.Join(out, n.name+"-goroutines.txt"))
		f, err := os.Create(filepath.Join(out, n.name+"-entities.json"))
		if err != nil {
			r.logf("diagnosis: %v", err)
			continue
		}
		for _, p := range paths {
			body, err := r.fetch(ctx, n.admin, p)
			if err != nil {
				fmt.Fprintf(f, "{\"path\":%q,\"error\":%q}\n", p, err.Error())
				continue
			}
			f.Write(body)
		}
		f.Close()
	}
	return out
}

// save writes a node's answer for path to file.
func (r *runner) save(ctx context.Context, addr, path, file string) {
	body, err := r.fetch(ctx, addr, path)
	if err != nil {
		body = []byte(err.Error() + "\n")
	}
	if err := os.WriteFile(file, body, 0o644); err != nil {
		r.logf("diagnosis: %v", err)
	}
}

func (r *runner) fetch(ctx context.Context, addr, path string) ([]byte, error) {
	resp, err := r.admin.get(ctx, addr, path, 10*time.Second)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return io.ReadAll(io.LimitReader(resp.Body, 64<<20))
}

// transferSources maps each transfer of ops to its source account.
func transferSources(ops []history.Op) map[string]string {
	from := make(map[string]string)
	for _, op := range ops {
		if op.Op == history.OpTransfer {
			from[op.ID] = op.From
		}
	}
	return from
}
