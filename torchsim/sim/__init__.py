"""torchsim.sim: the event-driven engine that runs tile graphs on hardware profiles.

Never imports torch or torchsim.lowering.
"""

from torchsim.sim import (
    native as native,  # first: picks the compiled engine modules or their source (torchsim.sim.native)
)
from torchsim.sim.ccws import CacheConscious  # registers the "ccws" policy
from torchsim.sim.engine import simulate
from torchsim.sim.policy import (
    POLICIES,
    GreedyThenOldest,
    IssuePolicy,
    RoundRobin,
    TwoLevel,
    get_policy,
    register_policy,
)
from torchsim.sim.result import DeadlockError, KernelResult, NodeRecord

__all__ = ["POLICIES", "CacheConscious", "DeadlockError", "GreedyThenOldest", "IssuePolicy", "KernelResult",
           "NodeRecord", "RoundRobin", "TwoLevel", "get_policy", "register_policy", "simulate"]
