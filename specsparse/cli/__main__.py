"""`python -m specsparse.cli`: the `specsparse` command without the installed script."""

import sys

from specsparse.cli import main

sys.exit(main())
