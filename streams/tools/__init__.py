"""The `barcast` command (cli.py) and its subcommands, the top layer: each may import anything
below it, and nothing imports a tool."""
