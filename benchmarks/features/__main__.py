"""`python -m benchmarks.features`: see run.py."""

import sys

from benchmarks.features.run import main

sys.argv[0] = "python -m benchmarks.features"  # the name argparse shows in its usage line
raise SystemExit(main())
