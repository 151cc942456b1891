"""``python -m workbench`` (also what ``torchrun -m workbench train ...`` runs)."""

import sys

from .cli import main

sys.exit(main())
