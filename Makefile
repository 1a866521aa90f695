# Every target installs what it needs into .venv first, so a fresh clone needs no hand steps.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp

.PHONY: install dist docs demo demo-ticket demo-loan test lint typecheck unit drift diagrams bench bench-cli bench-import bench-stores bench-runtime bench-ui bench-claims bench-engine clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

DEMO := .demo
AGENTFSM := $(VENV)/bin/agentfsm

# The main job: replay the bundled logs, drive every runtime scenario on the embedded SQLite
# store (an approval given from another process with `agentfsm approve`), then read the
# store's log back with the command line (one refund is left waiting for its approver, for
# the web UI's inbox); then the four agent SDKs' own runners, offline, on the same store,
# their logs checked and drawn like native ones; then two lifecycles of your own.
demo: $(STAMP)
	$(PY) examples/demo.py
	rm -rf $(DEMO) && mkdir -p $(DEMO)
	$(PY) examples/demo_runtime.py --dir $(DEMO) --export $(DEMO)/runs.jsonl
	$(AGENTFSM) runs --store $(DEMO)/runs.db
	$(AGENTFSM) validate $(DEMO)/runs.jsonl
	$(AGENTFSM) replay $(DEMO)/runs.jsonl --run-id runaway-1
	$(AGENTFSM) inspect $(DEMO)/runs.jsonl --run-id cancel-123
	$(AGENTFSM) diagram --run $(DEMO)/runs.jsonl --run-id runaway-1 --format mermaid
	$(PY) examples/demo_adapters.py --dir $(DEMO) --export $(DEMO)/sdk-runs.jsonl
	$(AGENTFSM) validate $(DEMO)/sdk-runs.jsonl
	$(AGENTFSM) diagram --run $(DEMO)/sdk-runs.jsonl --run-id sdk-openai --format mermaid
	$(MAKE) --no-print-directory demo-ticket
	$(MAKE) --no-print-directory demo-loan
	@echo
	@echo "See these runs in a browser (runs, a run's path, approvals: refund-77 waits for one):"
	@echo "  $(AGENTFSM) ui --store $(DEMO)/runs.db"

TICKET := examples.lifecycles.ticket:TICKET_TABLE
TICKETS := $(DEMO)/tickets.db

# A second lifecycle, your own: a support ticket a person can take over (`escalated`, reached
# by `ticket.escalated`, an event type of that lifecycle). The Runner drives it on SQLite; the
# approver's rejection, the escalation and the hand-back are made from the command line.
demo-ticket: $(STAMP)
	mkdir -p $(DEMO) && rm -f $(TICKETS)
	$(PY) examples/demo_ticket.py start --db $(TICKETS)
	$(AGENTFSM) reject t-1 t1.1 --approver ann --reason "needs a human" --store $(TICKETS) --table $(TICKET)
	$(AGENTFSM) append t-1 ticket.escalated escalated_to=tier-2 --store $(TICKETS) --table $(TICKET)
	$(PY) examples/demo_ticket.py drive --db $(TICKETS)
	$(AGENTFSM) append t-1 ticket.handed_back note="refunded by hand" --store $(TICKETS) --table $(TICKET)
	$(PY) examples/demo_ticket.py drive --db $(TICKETS)
	$(AGENTFSM) export --store $(TICKETS) --table $(TICKET) -o $(DEMO)/tickets.jsonl
	$(AGENTFSM) validate $(DEMO)/tickets.jsonl --table $(TICKET)
	$(AGENTFSM) diagram --table $(TICKET) --run $(DEMO)/tickets.jsonl --format mermaid

LOAN := examples.lifecycles.loan:DEMO_LOAN_TABLE
LOANS := $(DEMO)/loans.db

# A lifecycle whose agent moves its own run: its tool asks for documents (the run waits in
# `documents_requested`), the applicant's answer comes from the command line, the agent's
# decision makes an offer (`offer_made`, open 1 s in this demo), nobody signs, and the
# embedded Worker's timer declines the run: `declined`, with no person steering it there.
demo-loan: $(STAMP)
	mkdir -p $(DEMO) && rm -f $(LOANS)
	$(PY) examples/demo_loan.py start --db $(LOANS)
	$(AGENTFSM) append L-1 loan.documents_received 'document_ids:=["payslip-1","id-1"]' --store $(LOANS) --table $(LOAN)
	$(PY) examples/demo_loan.py work --db $(LOANS) --until-settled --export $(DEMO)/loans.jsonl
	@echo "Its path, drawn: $(AGENTFSM) diagram --table $(LOAN) --run $(DEMO)/loans.jsonl"

# The sdist and the wheel in dist/, their metadata checked as PyPI would. tests/test_release.py
# (part of `make test`) also installs the wheel into a clean venv and runs the README on it.
dist: $(STAMP)
	rm -rf dist
	$(PY) -m build --no-isolation --outdir dist .
	$(PY) -m twine check --strict dist/*

# The documentation site in site/: docs/ and the API reference generated from the docstrings
# (docsite/), strict: a broken link or a public name without a docstring fails it. Not
# --quiet: it hides warnings from strict mode too, so a broken link would pass.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

lint: $(STAMP)
	$(VENV)/bin/ruff check agentfsm tests benchmarks examples docsite
	$(VENV)/bin/ruff format --check agentfsm

typecheck: $(STAMP)
	$(VENV)/bin/mypy

# The suite runs in TEST_WORKERS processes (pytest-xdist). Most tests wait on a real program
# (PostgreSQL, Chromium, the claude CLI, workers in subprocesses), so more processes than cores
# pays: on 2 cores, 1 process took 817-1092 s, 2 took 599 s, 4 took 486 s. worksteal keeps the
# few long tests (seeded SIGKILLs, two machines) from leaving the other processes idle at the end.
TEST_WORKERS ?= 4
unit: $(STAMP)
	$(PY) -m pytest -n $(TEST_WORKERS) --dist worksteal

# The committed diagrams/ must match the table (no Graphviz needed: pictures carry a digest).
drift: $(STAMP)
	$(VENV)/bin/agentfsm diagram --check

# Regenerate diagrams/ after changing the default table (needs Graphviz `dot`).
diagrams: $(STAMP)
	$(VENV)/bin/agentfsm diagram --write

test: lint typecheck unit drift

bench: $(STAMP)
	$(PY) benchmarks/bench_core.py
	$(PY) benchmarks/bench_guards.py
	$(PY) benchmarks/growth.py --check
	$(PY) benchmarks/claim_scaling.py
	$(PY) benchmarks/claim_plan_postgres.py
	$(PY) benchmarks/ui_load.py

# Every command that reads a log or a store, at 10,000 to 200,000 runs (and events): flat or fail.
bench-cli: $(STAMP)
	$(PY) benchmarks/bench_cli.py --growth --check

# `import agentfsm` today (lazy) next to the eager import it replaced, in fresh processes.
bench-import: $(STAMP)
	$(PY) benchmarks/bench_import.py

# Starts its own throwaway PostgreSQL server; needs the bench extra (LangGraph checkpointers).
# Then where one append's CPU goes, next to the raw insert (SQLite, no fsync).
bench-stores: $(STAMP)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[dev,bench]'
	$(PY) benchmarks/bench_stores.py
	$(PY) benchmarks/store_costs.py

# The Runner's cost per turn next to the OpenAI Agents SDK and LangGraph (the bench extra).
bench-runtime: $(STAMP)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[dev,bench]'
	$(PY) benchmarks/bench_runtime.py

# The web UI: a runs-list page over 100,000 runs, a run page of a 10,000-event run.
bench-ui: $(STAMP)
	$(PY) benchmarks/bench_ui.py
	$(PY) benchmarks/ui_load.py

# A Worker's claim and three workers' drain rate from 0 to 50,000 runnable runs (issue 32),
# and the rows one PostgreSQL claim reads at 100 / 1,000 / 10,000 runnable.
bench-claims: $(STAMP)
	$(PY) benchmarks/claim_scaling.py
	$(PY) benchmarks/claim_plan_postgres.py

# Procrastinate jobs vs the lease Worker on one throwaway PostgreSQL: runs/s, wake-up, failover.
bench-engine: $(STAMP)
	$(PY) benchmarks/bench_engine.py

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache .hypothesis
