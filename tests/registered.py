"""The registered routing policies and step costs of the batching model, for the tests'
parametrizations: a policy or a step cost added to its registry is tested everywhere these
lists are used, with nothing to edit here."""

from routesim.batching.policies import POLICIES as _POLICIES
from routesim.step_cost import FORMS as _FORMS

POLICIES = tuple(m.NAME for m in _POLICIES)
"""token-interface.md's policy names, in code order (least_queue, an alias of
least_requests, is not among them)."""
STEP_COSTS = tuple(f.NAME for f in _FORMS)
