"""One module per kernel kind for `torchsim kernel KIND`."""
