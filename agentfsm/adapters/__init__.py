"""Adapters between agentfsm and the tools around it.

Each lives in its own module and is imported from there, so an optional dependency is only
needed by the adapter that uses it:

- `agentfsm.stores`: event stores (memory, SQLite, PostgreSQL);
- `agentfsm.adapters.structlog`: `LoggingReducer` and the transition log's shape;
- `agentfsm.adapters.openai_agents` (`agentfsm[openai-agents]`): `AgentsRun`;
- `agentfsm.adapters.langgraph` (`agentfsm[langgraph]`): `GraphRun`, `approval_request`;
- `agentfsm.adapters.pydantic_ai` (`agentfsm[pydantic-ai]`): `AgentIterRun`;
- `agentfsm.adapters.claude_agent_sdk` (`agentfsm[claude]`): `ClaudeRun`;
- `agentfsm.adapters.jobs`: `AdapterJobs`, an adapter's runs as a job engine's
  (`agentfsm.runtime.procrastinate`);
- `agentfsm.adapters.otel` (`agentfsm[otel]`): `RunSpans`, `trace_run`.
"""
