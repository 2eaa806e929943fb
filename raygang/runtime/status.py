"""Moved to `raygang.control.status`. This module stays so that gang records an earlier
raygang stored (pickled with these class paths) can still be read back."""

from raygang.control.status import *  # noqa: F401,F403
