package cluster_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/ordo-actors/ordo/actors"
	"github.com/ordo-actors/ordo/cluster"
	"github.com/ordo-actors/ordo/internal/testutil"
	"github.com/ordo-actors/ordo/persistence/memory"
	"github.com/ordo-actors/ordo/proto/testpb"
	"github.com/stretchr/testify/require"
)

// chromium returns the path of a Chromium (or Chrome) binary. Without one
// the test is skipped, unless ORDO_REQUIRE_BROWSER=1 (CI), which fails it.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	const msg = "no chromium binary in PATH (install Debian's chromium: apt-get install chromium)"
	if os.Getenv("ORDO_REQUIRE_BROWSER") == "1" {
		t.Fatal(msg + "; ORDO_REQUIRE_BROWSER=1 requires the browser test")
	}
	t.Skip(msg + "; skipping the browser test")
	return ""
}

// pageState is what the dashboard page shows, read from its DOM.
type pageState struct {
	Members map[string]string `json:"members"` // node → state
	Leases  map[string]string `json:"leases"`  // node → lease shown
	Shards  []struct {
		Owner string `json:"o"`
		Epoch int64  `json:"e"`
	} `json:"shards"`
	Cards    int    `json:"cards"`
	Kinds    int    `json:"kinds"` // rows of calls by kind: samples arrived
	Timeline int    `json:"timeline"`
	Conn     string `json:"conn"`
	Error    string `json:"error"`
	// N3Moved: the timeline shows shards moved from n3.
	N3Moved bool `json:"n3moved"`
}

const readPage = `(() => ({
  members: Object.fromEntries([...document.querySelectorAll('#members tr[data-member]')].map((r) => [r.dataset.member, r.dataset.state])),
  leases: Object.fromEntries([...document.querySelectorAll('#members tr[data-member]')].map((r) => [r.dataset.member, r.cells[2].textContent])),
  shards: [...document.querySelectorAll('#shards .cell')].map((c) => ({ o: c.dataset.owner || '', e: Number(c.dataset.epoch || 0) })),
  cards: document.querySelectorAll('#nodes .node-card').length,
  kinds: document.querySelectorAll('#kinds tr[data-kind]').length,
  timeline: document.querySelectorAll('#timeline li').length,
  conn: document.getElementById('conn-text').textContent,
  error: document.getElementById('page-error').hidden ? '' : document.getElementById('page-error').textContent,
  n3moved: [...document.querySelectorAll('#timeline li[data-type="moves"]')].some((li) => /n3 \(epoch \d+\) →|shards n3 →/.test(li.textContent)),
}))()`

// waitPage reads the page until check accepts what it shows, or fails the
// test after timeout.
func waitPage(t *testing.T, ctx context.Context, timeout time.Duration, check func(pageState) error) pageState {
	t.Helper()
	var st pageState
	testutil.Eventually(t, timeout, 50*time.Millisecond, func() error {
		var err error
		st, err = chromedp.Run(ctx, chromedp.Evaluate[pageState](readPage))
		if err != nil {
			return err
		}
		if st.Error != "" {
			t.Fatalf("the page shows an error: %s", st.Error)
		}
		return check(st)
	})
	return st
}

func screenshot(t *testing.T, ctx context.Context, dir, name string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	require.NoError(t, err)
	path := filepath.Join(dir, name)
	require.NoError(t, os.WriteFile(path, png, 0o644))
	t.Logf("screenshot: %s", path)
}

// The dashboard in a real (headless) browser, against a real three-node
// cluster: it shows three members alive and every shard with an owner;
// clicking a shard lists its entities, the inspector shows one; once a node
// crashes, it shows that node dead or down and its shards owned by the
// others at higher epochs. Screenshots of both states go to the test's
// artifact directory (kept with go test -artifacts; the path is logged).
func TestDashboardInBrowser(t *testing.T) {
	exe := chromium(t)
	const shards = 32
	e := newEnv(t, memory.New(), shards)
	nodes := startAdminNodes(e, 3)

	// A light load through n1 while the page is open, so that its charts
	// have something to show.
	loadCtx, stopLoad := context.WithCancel(context.Background())
	var load sync.WaitGroup
	load.Add(1)
	go func() {
		defer load.Done()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for i := 0; loadCtx.Err() == nil; i++ {
			cctx, cancel := context.WithTimeout(loadCtx, 5*time.Second)
			_, _ = cluster.Call[*testpb.Value](cctx, nodes[0], counter(fmt.Sprintf("c%d", i%40)), &testpb.Add{Delta: 1})
			cancel()
			select {
			case <-loadCtx.Done():
			case <-tick.C:
			}
		}
	}()
	defer func() { stopLoad(); load.Wait() }()

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(exe), chromedp.WindowSize(1440, 1000))
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox) // Chromium refuses to run as root with its sandbox
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc() // waits for the browser to exit
	bctx, cancelBrowser := chromedp.NewContext(actx)
	defer cancelBrowser()
	ctx, cancel := context.WithTimeout(bctx, 60*time.Second)
	defer cancel()
	dir := t.ArtifactDir()

	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate("http://"+nodes[0].AdminAddr()+"/")))
	waitPage(t, ctx, 15*time.Second, func(st pageState) error {
		if fmt.Sprint(st.Members) != "map[n1:alive n2:alive n3:alive]" {
			return fmt.Errorf("members %v", st.Members)
		}
		if len(st.Shards) != shards {
			return fmt.Errorf("%d shards shown", len(st.Shards))
		}
		for s, c := range st.Shards {
			if c.Owner == "" || c.Epoch == 0 {
				return fmt.Errorf("shard %d shown without owner or epoch: %+v", s, c)
			}
		}
		if st.Cards != 3 || st.Kinds == 0 || st.Conn != "live" {
			return fmt.Errorf("%d node cards, %d kinds with calls, connection %q", st.Cards, st.Kinds, st.Conn)
		}
		for _, n := range nodes {
			if want := fmt.Sprintf("%x", n.Status().Lease); st.Leases[n.ID()] != want {
				return fmt.Errorf("%s's lease shown as %q, want %s", n.ID(), st.Leases[n.ID()], want)
			}
		}
		return nil
	})

	// Click the shard of counter c1, and inspect c1.
	shard := fmt.Sprint(actors.ShardOf(counter("c1"), shards))
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`#shards .cell[data-shard="`+shard+`"]`))))
	require.NoError(t, chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(`#shard-panel a[data-id="c1"]`))))
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`#shard-panel a[data-id="c1"]`))))
	inspected, err := chromedp.Run(ctx, chromedp.Poll[string](
		`(document.querySelector('#inspect-out .kv') || {}).textContent`, chromedp.WithPollingTimeout(10*time.Second)))
	require.NoError(t, err)
	require.Contains(t, inspected, "counter/c1")
	require.Contains(t, inspected, "shard"+shard)
	require.Regexp(t, `record\s*seq [1-9]`, inspected)
	// c1 is active: the inspector shows its writes as the entity and the
	// batcher see them.
	require.Regexp(t, `in memory\s*write [1-9][0-9]*, durable [1-9]`, inspected)
	require.Regexp(t, `batcher\s*durable [1-9]`, inspected)
	screenshot(t, ctx, dir, "dashboard-3-nodes.png")

	before := nodes[2].Owned()
	require.NotEmpty(t, before)
	e.kill(nodes[2])
	st := waitPage(t, ctx, 20*time.Second, func(st pageState) error {
		if s := st.Members["n3"]; s != "dead" && s != "down" {
			return fmt.Errorf("n3 shown %q", s)
		}
		if st.Members["n1"] != "alive" || st.Members["n2"] != "alive" {
			return fmt.Errorf("members %v", st.Members)
		}
		var wrong []string
		for s, ep := range before {
			if c := st.Shards[s]; (c.Owner != "n1" && c.Owner != "n2") || c.Epoch <= ep {
				wrong = append(wrong, fmt.Sprintf("%d: %s@%d (was n3@%d)", s, c.Owner, c.Epoch, ep))
			}
		}
		if len(wrong) > 0 {
			sort.Strings(wrong)
			return fmt.Errorf("n3's shards not yet shown taken over: %s", strings.Join(wrong, ", "))
		}
		if !st.N3Moved {
			return fmt.Errorf("the timeline does not show n3's shards moving")
		}
		return nil
	})
	require.NotZero(t, st.Timeline)
	screenshot(t, ctx, dir, "dashboard-n3-killed.png")
}
