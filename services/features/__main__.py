import sys

from services.features.main import main

sys.exit(main(sys.argv[1:]))
