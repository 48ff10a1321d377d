"""The stream runtime, Faust-free: barcast's whole at-least-once contract, with idempotent
outputs (docs/design.md, Commit protocol).

An agent (streams.agents, the only Faust code) hands each batch of its source topic to its
`Committer` (commit.py), which admits the records in offset order, restores the stores of a
partition it sees first (stores.py), runs the agent's stages (stages/: typed code over the
records of records.py) and commits their effects. Outputs go to the producer (kafka_io.py)
without waiting; too large ones become bounded dead letters, and records a stage cannot read
dead letters too (policy.py). `build_pipeline` (pipeline.py) wires a role's stages and stores.
"""
