"""torchsim.sim: the event-driven engine that runs tile graphs on hardware profiles.

Never imports torch or torchsim.lowering.
"""

from torchsim.sim.engine import simulate
from torchsim.sim.policy import POLICIES, GreedyThenOldest, IssuePolicy, RoundRobin, get_policy
from torchsim.sim.result import DeadlockError, KernelResult, NodeRecord

__all__ = ["POLICIES", "DeadlockError", "GreedyThenOldest", "IssuePolicy", "KernelResult", "NodeRecord",
           "RoundRobin", "get_policy", "simulate"]
