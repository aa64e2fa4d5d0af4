package chaos

import (
	"context"
	"time"

	"github.com/ordo-actors/ordo/placement"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Observer watches a run from outside the cluster (bank soak samples its
// processes with one). It must not change what the run does.
type Observer interface {
	// Observe is called once, in a goroutine of its own, when the load
	// has started. It watches until checked is closed (once the check has
	// run), takes its last samples and returns; Run waits for it before it
	// writes its report and stops the cluster. ctx ends when Run is
	// cancelled or fails.
	Observe(ctx context.Context, c *Cluster, checked <-chan struct{})
}

// Cluster is an Observer's view of a run. Safe for concurrent use.
type Cluster struct {
	r        *runner
	loadDone <-chan struct{}
}

// Process is one process of the cluster as Cluster.Processes saw it.
type Process struct {
	// Name is the node ID (n1, …) or the etcd member's name (e1, …).
	Name string
	// Node is true for a `bank node`, false for an etcd member.
	Node bool
	// PID is the current incarnation's process ID, 0 when not running.
	PID int
	// Incarnation counts the process's starts, from 1.
	Incarnation int
	// Started is when the current incarnation started.
	Started time.Time
	// Stopped is true while the process is stopped (SIGSTOP).
	Stopped bool
	// Admin is a node's admin address (host:port, plain HTTP on loopback).
	Admin string
	// ClientURL is an etcd member's client URL.
	ClientURL string
}

// Processes returns the nodes, then the etcd members, as they are now.
func (c *Cluster) Processes() []Process {
	var out []Process
	for _, n := range c.r.nodes {
		inc, pid, started, stopped := n.proc.state()
		out = append(out, Process{Name: n.name, Node: true, PID: pid, Incarnation: inc, Started: started,
			Stopped: stopped, Admin: n.admin})
	}
	for _, m := range c.r.members {
		inc, pid, started, stopped := m.proc.state()
		out = append(out, Process{Name: m.name, PID: pid, Incarnation: inc, Started: started, Stopped: stopped,
			ClientURL: m.clientURL})
	}
	return out
}

// Etcd is a client of the etcd members, not proxied (the observer's reads
// see no partition). It belongs to the run: do not close it.
func (c *Cluster) Etcd() *clientv3.Client { return c.r.etcd }

// EtcdEndpoints are the members' client URLs, in member order.
func (c *Cluster) EtcdEndpoints() []string { return c.r.directEndpoints() }

// Prefix is the cluster's etcd key prefix (the nodes' --prefix default);
// with the etcd store, entity records live under Prefix + "/store/".
func (c *Cluster) Prefix() string { return placement.DefaultConfig().Prefix }

// Store is the nodes' store: "etcd" or "postgres".
func (c *Cluster) Store() string { return c.r.cfg.Store }

// PGURL is the URL of the database the nodes use (postgres store), not
// proxied.
func (c *Cluster) PGURL() string { return c.r.cfg.PGURL }

// Accounts is the number of accounts the bank was opened with.
func (c *Cluster) Accounts() int { return c.r.cfg.Accounts }

// LoadStart is when the load started.
func (c *Cluster) LoadStart() time.Time { return c.r.start }

// LoadDone is closed when the load process has exited.
func (c *Cluster) LoadDone() <-chan struct{} { return c.loadDone }
