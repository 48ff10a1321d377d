"""`python -m benchmarks.model_report`: see run.py."""

import sys

from benchmarks.model_report.run import main

sys.argv[0] = "python -m benchmarks.model_report"  # the name argparse shows in its usage line
raise SystemExit(main())
