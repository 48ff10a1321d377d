"""The stream runtime: barcast's whole at-least-once contract, with idempotent outputs.

An agent (streams.agents, the only Faust code) hands each take() batch of its source topic to
a `Checkpointer` (commit.py), which admits its records in offset order, restores the stores
of a partition it sees first, and runs the agent's stages (stages/: typed code over the records
of records.py, no Faust, no Kafka). Their outputs go to the producer (kafka_io.py) without
waiting; too large ones become bounded dead letters (policy.py). The records stay unacked until
a checkpoint: downstream stages drained (stages/forecasts.py), the stores' changes encoded;
then, the agent going on, outputs acked -> stores flushed -> per source partition, a mark of the
offset the flush covers up to -> source offsets committed.

Stores (stores.py) tag every changelog record with the source partition and offset of the
input that wrote it. A restore takes a partition's last mark as its boundary: a record at or
past it belongs to a flush that never completed and is not restored; the worker resumes at the
boundary, the checkpointer skips the records before it once, and the inputs from there apply
again to the states as they were. So after a crash every store is exactly as of one boundary,
and a replayed record publishes the same outputs again (a repeat is byte-identical).

A graceful stop (SIGTERM) repeats nothing: once Faust's consumer stops fetching, every agent
takes a last checkpoint and only then does the producer stop (`Runtime.close`); a batch that
reaches an agent after it is left unacked, for whoever reads the partition next.
"""
