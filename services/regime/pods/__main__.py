import sys

from services.regime.pods.main import main

sys.exit(main(sys.argv[1:]))
