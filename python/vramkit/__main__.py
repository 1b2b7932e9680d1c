"""``python -m vramkit ARGS``: the ``vram`` command, run through the extension."""

import sys

from ._vramkit import main

if __name__ == "__main__":
    sys.exit(main(["vram", *sys.argv[1:]]))
