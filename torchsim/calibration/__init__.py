"""Calibration: fit a small, named set of physical profile parameters to measurements (`torchsim calibrate`)."""

from torchsim.calibration.params import PARAMS, CalibrationError, Param

__all__ = ["PARAMS", "CalibrationError", "Param"]
