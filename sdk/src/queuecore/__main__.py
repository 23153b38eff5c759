"""``python -m queuecore``: the same as the ``queuecore`` command."""

import sys

from ._cli import main

sys.exit(main())
