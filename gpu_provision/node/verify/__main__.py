"""``python3 -m <package>`` entry point of the verification agent."""

import sys

from .main import main

sys.exit(main())
