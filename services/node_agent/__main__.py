"""`python -m services.node_agent` = `borgctl serve node-agent`."""

import sys

from services.node_agent.main import main

raise SystemExit(main(sys.argv[1:]))
