"""The generated sections of README.md and docs/: tables and figures made from
benchmarks/results/*.json and from the code, so that the text and its evidence cannot disagree.

    .venv/bin/python -m benchmarks.docs [--write]

names each section that differs from what its source makes, or with `--write` rewrites them.
"""
