"""The second version of the support-ticket lifecycle, for `docs/lifecycles.md`'s "Versions".

    from examples.lifecycles.ticket_v2 import TICKET_TABLE_V2

What changed from `TICKET_TABLE`: urgent escalations no longer get a state of their own (a
supervisor is paged by the helpdesk instead), and a person holding a ticket may pause it.
Its name is the same: it is another version of `support_ticket` (another digest), and runs
started under the first version keep it.
"""

from __future__ import annotations

from agentfsm import Transition
from agentfsm.names import RunStatus
from examples.lifecycles.ticket import TICKET_TABLE

__all__ = ["TICKET_TABLE_V2"]

#: Version 2: no `escalated_urgent`; `escalated` may be paused.
TICKET_TABLE_V2 = TICKET_TABLE.derive(
    remove_states=["escalated_urgent"],
    add=[Transition("escalated", "run.paused", RunStatus.PAUSED)],
)
