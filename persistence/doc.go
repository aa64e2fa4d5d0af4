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
// # Journals
//
// A Store may also implement Journal: an append-only journal of events per
// entity, for event-sourced entities. Events travel in Record.Events and are
// appended by Save in the same per-shard atomic step as the records' Data
// (where an event-sourced entity keeps its snapshot and recent replies), so
// fencing covers them exactly as it covers records: an append under a stale
// epoch is refused and never visible. The store keeps each entity's
// sequence numbers gapless itself, refusing a group whose events do not
// continue the journal with a *SequenceError (ErrSequence).
// Record.DeleteEventsBefore deletes events a snapshot covers, in the same
// step as the Save that writes the snapshot, always keeping the last event.
//
// ReadEvents reads one entity's events from a sequence number (replay on
// activation); ReadJournal follows the events of one kind, across all its
// entities, in commit order per shard, from a stored Offset, never passing
// over an event that commits later (projections, read models). Save's
// contract and cost for records without events are unchanged.
//
// # Reminder index
//
// A record may carry a due time (Record.Due: when the entity's earliest
// durable reminder is due). A Store that implements ReminderIndex indexes
// records by it, per shard, and Save moves a record's entry in the same
// per-shard atomic step as the record, under the same fence: a refused
// Save leaves the index as it was. ReminderIndex.Due lists a shard's
// earliest entries up to a time, so that the shard's owner finds the
// entities whose reminders are due without loading any other record: its
// cost follows the entries it returns, never the number of reminders.
// PostgreSQL keeps the due time in the record's row (a partial index);
// etcd keeps a key per entry and removes the old one at Record.PrevDue,
// which the writer supplies; a wrong PrevDue leaves a stale entry, which
// callers check against the record and a later Save removes.
//
// This package holds only the contract; drivers live in sub-packages
// (persistence/memory, persistence/etcdstore, persistence/pgstore) and the
// conformance suite that every driver passes lives in persistence/storetest.
package persistence
