"""`python -m benchmarks.backtest_check`: see run.py."""

import sys

from benchmarks.backtest_check.run import main

sys.argv[0] = "python -m benchmarks.backtest_check"  # the name argparse shows in its usage line
raise SystemExit(main())
