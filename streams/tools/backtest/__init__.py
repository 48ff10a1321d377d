"""`barcast backtest`: files replayed through a real worker, what it published read back from
the topics, scored, and written as a report (JSON and HTML).

One concern a module: `inputs` (the files and their hashes), `harness` (broker, worker,
replay), `collect` (topics read until every replayed bar is accounted for), `scores` (the
scoring module's per-forecast scores as arrays), `figures` (the report's numbers), `html` (its
page), `cli` (the subcommand). The JSON holds no wall-clock time and no latency, so the same
files and checkpoint give the same bytes.
"""
