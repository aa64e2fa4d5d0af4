// Package persistence defines the storage contract of ordo: a Store keeps
// one record per entity and enforces per-shard fencing on every write.
//
// # Fencing
//
// Every shard has a fence: the highest epoch any owner of the shard has
// announced through Fence. A record carries the (shard, epoch) of the owner
// that wrote it, and Save accepts it only when, inside the same atomic step
// as the write, the shard's fence still equals the record's epoch. An owner
// that was paused, cut off or slow while a newer owner fenced the shard can
// therefore never make a write visible again: its records are rejected with
// an error matching ErrFenced.
//
// The protocol an owner follows is: acquire the shard (placement mints the
// epoch), call Fence(shard, epoch) before reading any state of the shard,
// then Load and Save under that epoch.
//
// This package holds only the contract; drivers live in sub-packages
// (persistence/memory, persistence/etcd, persistence/postgres) and the
// conformance suite that every driver passes lives in persistence/storetest.
package persistence
