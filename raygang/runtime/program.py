"""Moved to `raygang.control.program`. This module stays so that gang records an earlier
raygang stored (pickled with these class paths) can still be read back."""

from raygang.control.program import *  # noqa: F401,F403
