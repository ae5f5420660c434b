"""``python -m floe_dagster.cli``: the ``floe-dagster`` command."""

import sys

from floe_dagster.cli import main

sys.exit(main())
