"""`python -m allreduced.launch`: see allreduced.launch.cli."""
import sys

from allreduced.launch.cli import main

sys.exit(main())
