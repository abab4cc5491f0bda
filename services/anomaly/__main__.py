import sys

from services.anomaly.main import main

sys.exit(main(sys.argv[1:]))
