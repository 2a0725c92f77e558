"""Moved to `launch.devices` (a pool's device groups are the launcher's); this path imports it, with a
FutureWarning, for a release."""

from ..utils.public import moved_module

moved_module(__name__)
