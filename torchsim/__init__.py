"""torchsim: performance prediction for PyTorch models on GPUs and Tensix accelerators, without the hardware."""

__version__ = "0.1.0"
