from torchsim.sim.state cimport CtaState, SmState
from torchsim.sim.resources cimport BandwidthServer, CycleHeap, DramServer, LruCache, Pipeline
