"""`python -m benchmarks.model`: see run.py."""

import sys

from benchmarks.model.run import main

sys.argv[0] = "python -m benchmarks.model"  # the name argparse shows in its usage line
raise SystemExit(main())
