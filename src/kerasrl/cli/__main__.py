"""`python -m kerasrl.cli`: the `kerasrl` command."""

import sys

from kerasrl.cli import main

if __name__ == "__main__":  # not when imported (tests import every module)
    sys.exit(main())
