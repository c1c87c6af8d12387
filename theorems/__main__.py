"""`python -m theorems list|check ...`: see theorems.framework.cli."""

import os
import sys

from theorems.framework.cli import main

try:
    code = main()
    sys.stdout.flush()
except BrokenPipeError:
    # Output piped into a reader that stopped early (`| head`): not an error of ours.
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    code = 0
raise SystemExit(code)
