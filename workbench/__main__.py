"""``python -m workbench`` (also what ``torchrun -m workbench train ...`` runs)."""

import sys

from workbench.tools.cli.main import main

sys.exit(main())
