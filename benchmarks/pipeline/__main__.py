"""`python -m benchmarks.pipeline`: see run.py."""

import sys

from benchmarks.pipeline.run import main

sys.argv[0] = "python -m benchmarks.pipeline"  # the name argparse shows in its usage line
raise SystemExit(main())
