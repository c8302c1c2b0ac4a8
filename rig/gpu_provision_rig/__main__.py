"""``python -m gpu_provision_rig``: the same command line as ``gpu-provision-rig``."""

import sys

from gpu_provision_rig.cli import main

sys.exit(main())
