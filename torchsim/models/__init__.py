"""torchsim.models: the built-in model definitions (Llama-3 family, Mixtral), HF configs, MoE routing counts.

Importing the package registers the MoE fusion patterns with lowering (moe_patterns.py).
"""

from torchsim.models import moe_patterns as moe_patterns  # noqa: F401  (registers its patterns on import)
