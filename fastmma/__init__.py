"""fastmma: NVIDIA Hopper (sm_90a) PTX matrix instructions, bit for bit, on the CPU."""

from . import errors
from .errors import FastmmaError

__version__ = "0.1.0"
