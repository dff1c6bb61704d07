from torchsim.cli import run

run()
