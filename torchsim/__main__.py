import sys

from torchsim.cli import main

sys.exit(main())
