import sys

from services.regime.main import main

sys.exit(main(sys.argv[1:]))
