"""`python -m theorems list|check ...`: see theorems.cli."""

from theorems.cli import main

raise SystemExit(main())
