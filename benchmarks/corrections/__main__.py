"""`python -m benchmarks.corrections`: see run.py."""

import sys

from benchmarks.corrections.run import main

sys.argv[0] = "python -m benchmarks.corrections"  # the name argparse shows in its usage line
raise SystemExit(main())
