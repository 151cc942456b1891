"""``python -m workbench`` (also what ``torchrun -m workbench train ...`` runs)."""

import sys

from workbench.tools.cli import main

sys.exit(main())
