"""torchsim.hwmodels.tensix: Tenstorrent Tensix hardware (Wormhole n150/n300, Blackhole p150).

Profiles (profiles.py, numbers in facts.py), data formats and math fidelity (formats.py), the NoC and DRAM
model (noc.py) and the per-core unit cost model (core.py). Imports only torchsim.graph and torchsim.hwmodels.
"""
