import sys

from services.pod_pressure.main import main

sys.exit(main(sys.argv[1:]))
