"""`python -m benchmarks.online_calibration`: see run.py."""

import sys

from benchmarks.online_calibration.run import main

sys.argv[0] = "python -m benchmarks.online_calibration"  # the name argparse shows in its usage line
raise SystemExit(main())
