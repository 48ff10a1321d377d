"""`python -m benchmarks.replay`: see run.py."""

import sys

from benchmarks.replay.run import main

sys.argv[0] = "python -m benchmarks.replay"  # the name argparse shows in its usage line
raise SystemExit(main())
