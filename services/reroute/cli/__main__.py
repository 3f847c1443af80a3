"""``python -m services.reroute.cli``: the ``reroute`` command."""

import sys

from services.reroute.cli.main import main

sys.exit(main())
