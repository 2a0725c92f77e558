"""Moved to `launch.devices` (a pool's device groups are the launcher's); importable from here for a release."""

from ..launch.devices import VISIBLE, DeviceSlots, Machine, held, pin, visible_devices

__all__ = ["VISIBLE", "DeviceSlots", "Machine", "held", "pin", "visible_devices"]
