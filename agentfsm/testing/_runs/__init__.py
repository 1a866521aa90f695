"""Logs generated from a table: the implementation behind `agentfsm.testing`'s strategies.

Private: users import the names from `agentfsm.testing`. Every module here needs Hypothesis.
From the ground up:

- `sampling` (examples of a strategy, from inside a test too), `custom` (payloads of a
  table's own event types), `tools` (the agent's tools as the kit sees them);
- `candidates`: the well-formed events that could come next from a record (the reducer is
  the judge);
- `coverage` (which edges logs took), `paths` (shortest logs to every edge), `plans` (those
  logs as examples of `legal_runs`), `walkspec` (what a walk needs, worked out once);
- `values` (ids, timestamps, payloads, single events), `steering` (goals for a walk);
- `walk` (`legal_runs`), `illegal` (`illegal_steps`), `stateful` (`run_machine`).

Each module imports only the ones above it in this list, and only names its `__all__` lists
(the group's internal API): no module reaches into another's underscore names.
"""
