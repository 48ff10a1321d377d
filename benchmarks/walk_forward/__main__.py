"""`python -m benchmarks.walk_forward`: see run.py."""

import sys

from benchmarks.walk_forward.run import main

sys.argv[0] = "python -m benchmarks.walk_forward"  # the name argparse shows in its usage line
raise SystemExit(main())
