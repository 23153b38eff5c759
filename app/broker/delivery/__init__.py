"""Delivery to consumer groups, one module per job.

- ``membership`` — join, heartbeat, leave, expiry and the rebalances they cause; ``MemberRef``, who a
  delivery call speaks for (topic, group, member id, generation).
- ``assignment`` — which member owns which partition (sticky).
- ``leases`` — the pull path: poll, ack, nack, extend on lease rows and the committed offset they move.
- ``push`` — a WebSocket member's loops: delivery, beat, rebalance, waits.
- ``acks`` — a WebSocket member's ack settlement (in memory, lazy, durable checkpoint, lease-row fallback).
- ``checkpoints`` — a WebSocket member's in-memory leases of a partition and what its checkpoint holds
  (how it is written is the metadata store's ``checkpoint_writer``).
- ``frames`` — the WebSocket wire frames; ``wakeup`` — the push loops' wake-up call.

Every durable fact lives in the metadata store (``group_members``, ``group_partitions``, ``group_leases``),
so any API process answers any pull member's call; only a push member keeps first-delivery leases in
memory, between checkpoints.
"""
