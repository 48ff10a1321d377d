"""The stream runtime: barcast's whole at-least-once contract, with idempotent outputs.

An agent (streams.agents, the only Faust code) hands each take() batch of its source topic to
a `Checkpointer` (checkpoint.py), which admits its records in offset order (its guard),
restores the stores of a partition it sees first, and runs the agent's stages on them
(stages/: plain typed code, no Faust, no Kafka). The stages' outputs go to the producer
(kafka_io.py) without waiting; too large ones become bounded dead letters (policy.py). The
records stay unacked until a checkpoint, one function: outputs acked -> downstream stages
drained (the forecaster, forecaster.py) -> stores flushed -> source offsets committed. Stores
(stores.py) tag every changelog record with the source offset that wrote it and restore only
what a commit covered, so after a crash every store is exactly as of the committed offset and
the replayed records produce the same outputs again (a repeat is byte-identical).

To add a stage: a class in stages/ whose `run` (or `apply`) takes the previous stage's typed
records (records.py) and returns its outputs (`Out`) and typed records for the next; call it
in the agent's `handle` in streams.agents, publishing its outputs with `checkpointer.publish`.
To add a store: a `StateStore(runtime.changelog(NAME), decode, encode, new)` (or a class with
`flush`, `restore` and `forget`, as `WindowStore`), its stage calling `read`/`write`, and the
store in the `Checkpointer`'s list. Observers (observers.py) are told of outputs in-process.
"""
