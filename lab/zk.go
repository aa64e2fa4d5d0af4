package lab

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/go-zookeeper/zk"
)

// ZKConfig configures the ZooKeeper lock approach.
type ZKConfig struct {
	// Servers are the ZooKeeper addresses (host:port).
	Servers []string
	// SessionTimeout is the session timeout, the lock's TTL; default 2s.
	// The server clamps it to [2, 20] × its tickTime.
	SessionTimeout time.Duration
	// Prefix is the root znode; default "/ordo-lab-zk".
	Prefix string
	// Sessions caps the idle lock sessions kept for reuse; default 64.
	Sessions int
}

// ZKLock is the ZooKeeper lock recipe: an ephemeral sequential node under
// the account's lock node, held when it is the lowest, otherwise waiting on
// a watch of its predecessor. Accounts are locked in sorted order; the
// balances are znodes read, then set with version -1 (unconditionally), so
// only the lock protects the read-modify-write.
//
// A transfer takes its locks on a session of its own. A pause keeps that
// session alive for SessionTimeout, then ends it (as the server would
// expire a session with no heartbeats), which deletes the lock nodes; the
// paused transfer then writes anyway through the shared data session, as a
// resumed process would after reconnecting. Safe for concurrent use.
type ZKLock struct {
	cfg      ZKConfig
	data     *zk.Conn
	idle     chan *zk.Conn
	accounts int
}

var _ Approach = (*ZKLock)(nil)

type zkQuiet struct{}

func (zkQuiet) Printf(string, ...any) {}

// NewZKLock connects to cfg.Servers.
func NewZKLock(cfg ZKConfig) (*ZKLock, error) {
	if len(cfg.Servers) == 0 {
		return nil, errors.New("lab: zk: no servers")
	}
	if cfg.SessionTimeout == 0 {
		cfg.SessionTimeout = 2 * time.Second
	}
	if cfg.Prefix == "" {
		cfg.Prefix = "/ordo-lab-zk"
	}
	if cfg.Sessions == 0 {
		cfg.Sessions = 64
	}
	z := &ZKLock{cfg: cfg, idle: make(chan *zk.Conn, cfg.Sessions)}
	c, err := z.dial()
	if err != nil {
		return nil, err
	}
	z.data = c
	return z, nil
}

func (z *ZKLock) dial() (*zk.Conn, error) {
	c, _, err := zk.Connect(z.cfg.Servers, z.cfg.SessionTimeout, zk.WithLogger(zkQuiet{}), zk.WithLogInfo(false))
	if err != nil {
		return nil, fmt.Errorf("lab: zk: connect: %w", err)
	}
	return c, nil
}

// Name implements Approach.
func (z *ZKLock) Name() string { return "zk" }

func (z *ZKLock) lockDir(i int) string { return z.cfg.Prefix + "/locks/" + strconv.Itoa(i) }
func (z *ZKLock) balPath(i int) string { return z.cfg.Prefix + "/bal/" + strconv.Itoa(i) }

var zkACL = zk.WorldACL(zk.PermAll)

func (z *ZKLock) ensure(path string, data []byte) error {
	_, err := z.data.Create(path, data, zk.FlagPersistent, zkACL)
	if errors.Is(err, zk.ErrNodeExists) {
		_, err = z.data.Set(path, data, -1)
	}
	return err
}

// Setup implements Approach.
func (z *ZKLock) Setup(ctx context.Context, accounts int, initial int64) error {
	z.accounts = accounts
	for _, p := range []string{z.cfg.Prefix, z.cfg.Prefix + "/locks", z.cfg.Prefix + "/bal"} {
		if err := z.ensure(p, nil); err != nil {
			return err
		}
	}
	v := []byte(strconv.FormatInt(initial, 10))
	for i := range accounts {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := z.ensure(z.lockDir(i), nil); err != nil {
			return err
		}
		// Lock nodes of an earlier run die with its sessions; drop any left.
		kids, _, err := z.data.Children(z.lockDir(i))
		if err != nil {
			return err
		}
		for _, k := range kids {
			if err := z.data.Delete(z.lockDir(i)+"/"+k, -1); err != nil && !errors.Is(err, zk.ErrNoNode) {
				return err
			}
		}
		if err := z.ensure(z.balPath(i), v); err != nil {
			return err
		}
	}
	return nil
}

// Balances implements Approach.
func (z *ZKLock) Balances(ctx context.Context) ([]int64, error) {
	out := make([]int64, z.accounts)
	for i := range out {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		b, err := z.get(i)
		if err != nil {
			return nil, err
		}
		out[i] = b
	}
	return out, nil
}

func (z *ZKLock) get(i int) (int64, error) {
	d, _, err := z.data.Get(z.balPath(i))
	if err != nil {
		return 0, fmt.Errorf("lab: zk: account %d: %w", i, err)
	}
	v, err := strconv.ParseInt(string(d), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("lab: zk: account %d: %w", i, err)
	}
	return v, nil
}

func (z *ZKLock) session() (*zk.Conn, error) {
	select {
	case c := <-z.idle:
		return c, nil
	default:
		return z.dial()
	}
}

func (z *ZKLock) release(c *zk.Conn) {
	select {
	case z.idle <- c:
	default:
		c.Close()
	}
}

// lock runs the lock recipe on dir with session c and returns the path of
// the lock node.
func (z *ZKLock) lock(ctx context.Context, c *zk.Conn, dir string) (string, error) {
	me, err := c.Create(dir+"/lock-", nil, zk.FlagEphemeralSequential, zkACL)
	if err != nil {
		return "", err
	}
	name := me[len(dir)+1:]
	for {
		kids, _, err := c.Children(dir)
		if err != nil {
			return "", err
		}
		slices.Sort(kids) // "lock-" + a 10-digit sequence number
		i := slices.Index(kids, name)
		if i < 0 {
			return "", fmt.Errorf("lab: zk: lock node %s vanished (session lost)", me)
		}
		if i == 0 {
			return me, nil
		}
		ok, _, ch, err := c.ExistsW(dir + "/" + kids[i-1])
		if err != nil {
			return "", err
		}
		if !ok {
			continue
		}
		select {
		case <-ch:
		case <-ctx.Done():
			_ = c.Delete(me, -1)
			return "", ctx.Err()
		}
	}
}

// Transfer implements Approach.
func (z *ZKLock) Transfer(ctx context.Context, from, to int, amount int64) error {
	c, err := z.session()
	if err != nil {
		return fmt.Errorf("%w: %w", ErrAborted, err)
	}
	closed := false
	var held []string
	defer func() {
		if closed {
			return
		}
		for _, p := range held {
			_ = c.Delete(p, -1)
		}
		if c.State() == zk.StateHasSession {
			z.release(c)
		} else {
			c.Close()
		}
	}()
	lo, hi := sortedPair(from, to)
	for _, i := range []int{lo, hi} {
		p, err := z.lock(ctx, c, z.lockDir(i))
		if err != nil {
			// A node created before the error goes with the session.
			for _, p := range held {
				_ = c.Delete(p, -1)
			}
			held = nil
			c.Close()
			closed = true
			return fmt.Errorf("%w: lock account %d: %w", ErrAborted, i, err)
		}
		held = append(held, p)
	}
	bf, err := z.get(from)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrAborted, err)
	}
	bt, err := z.get(to)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrAborted, err)
	}
	if bf < amount {
		return ErrInsufficientFunds
	}
	if d := Pausing(ctx); d > z.cfg.SessionTimeout {
		// The server would expire the silent session after its timeout,
		// deleting the lock nodes; the process resumes later.
		time.Sleep(z.cfg.SessionTimeout)
		c.Close()
		closed = true
		time.Sleep(d - z.cfg.SessionTimeout)
	} else if d > 0 {
		time.Sleep(d) // heartbeats would resume in time: the session lives
	}
	_, err = z.data.Multi(
		&zk.SetDataRequest{Path: z.balPath(from), Data: []byte(strconv.FormatInt(bf-amount, 10)), Version: -1},
		&zk.SetDataRequest{Path: z.balPath(to), Data: []byte(strconv.FormatInt(bt+amount, 10)), Version: -1},
	)
	if err != nil {
		return fmt.Errorf("lab: zk: write: %w", err)
	}
	return nil
}

// Close implements Approach.
func (z *ZKLock) Close() error {
	for {
		select {
		case c := <-z.idle:
			c.Close()
		default:
			z.data.Close()
			return nil
		}
	}
}
