"""`python -m tools.fleetctl ...`: the same as the `fleetctl` console script."""
import sys

from tools.fleetctl.cli import main

sys.exit(main())
