"""``python -m rankflow.cli``: the ``rankflow`` command."""

import sys

from . import main

sys.exit(main())
