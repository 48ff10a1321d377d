"""`python -m benchmarks.train_cost`: see run.py."""

import sys

from benchmarks.train_cost.run import main

sys.argv[0] = "python -m benchmarks.train_cost"  # the name argparse shows in its usage line
raise SystemExit(main())
