"""torchsim.hwmodels: hardware profiles (numbers with provenance) and the resource models that serve nodes.

Imports nothing else of torchsim except the graph vocabulary.
"""
