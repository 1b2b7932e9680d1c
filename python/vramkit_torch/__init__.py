"""The old import path of :mod:`vramkit.torch`, kept as an alias.

``import vramkit_torch`` gives the very same module object as ``import vramkit.torch``;
new code should use ``vramkit.torch``.
"""

import sys

from vramkit import torch as _torch

sys.modules[__name__] = _torch
