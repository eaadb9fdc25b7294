"""``python -m medpref`` = the ``medpref`` command."""

import sys

from medpref.cli import main

sys.exit(main())
