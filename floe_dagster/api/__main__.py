import sys

from floe_dagster.api.server import main

sys.exit(main())
