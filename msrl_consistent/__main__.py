"""`python -m msrl_consistent ...` is the `msrl` command."""
import sys

from msrl_consistent.entry import main

sys.exit(main())
