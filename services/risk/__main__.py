import sys

from services.risk.main import main

sys.exit(main(sys.argv[1:]))
