import sys

from services.forecast.main import main

sys.exit(main(sys.argv[1:]))
