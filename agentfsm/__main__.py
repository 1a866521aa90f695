"""`python -m agentfsm ...`: the same command line as the `agentfsm` script."""

from agentfsm.cli import main

raise SystemExit(main())
