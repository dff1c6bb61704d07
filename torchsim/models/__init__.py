"""torchsim.models: the built-in model definitions (Llama-3 family and Mixtral on a common decoder base), HF
configs and MoE routing counts.

Light on purpose (the command line reads DEFAULT_MODEL without importing torch); the model modules import torch.
The MoE fusion patterns register with lowering when mixtral.py (which defines the MoE modules) is imported.
"""

DEFAULT_MODEL = "llama3-8b"  # what `torchsim predict` and `torchsim.predict()` run without a model name
