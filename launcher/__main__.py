import sys

import launcher.early  # noqa: F401 - first: signal handlers before any heavy import
from launcher.cli import main

sys.exit(main())
