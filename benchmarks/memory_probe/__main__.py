"""`python -m benchmarks.memory_probe`: see run.py."""

import sys

from benchmarks.memory_probe.run import main

sys.argv[0] = "python -m benchmarks.memory_probe"  # the name argparse shows in its usage line
raise SystemExit(main())
