"""torchsim.hwmodels: hardware profiles (numbers with provenance) and the resource models that serve nodes.

Imports nothing else of torchsim except the graph vocabulary.
"""

from torchsim.hwmodels.gpu import GPU_PROFILES, Arch, GpuProfile
from torchsim.hwmodels.quantity import Quantity
from torchsim.hwmodels.registry import get_profile, profile_names

__all__ = ["GPU_PROFILES", "Arch", "GpuProfile", "Quantity", "get_profile", "profile_names"]
