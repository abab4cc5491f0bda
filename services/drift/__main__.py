import sys

from services.drift.main import main

sys.exit(main(sys.argv[1:]))
