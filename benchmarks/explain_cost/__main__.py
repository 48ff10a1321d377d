"""`python -m benchmarks.explain_cost`: see run.py."""

import sys

from benchmarks.explain_cost.run import main

sys.argv[0] = "python -m benchmarks.explain_cost"  # the name argparse shows in its usage line
raise SystemExit(main())
