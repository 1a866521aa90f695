"""What strict parsing costs: `parse_event` next to pydantic's own `validate_json`.

`parse_event` reads text with jiter (refusing repeated keys, NaN and Infinity) and then
validates the object, checking the value limits of `agentfsm.events.bounds`; pydantic's
`validate_json` does neither check (a repeated `sequence` silently keeps the last one). Both
run over the same seeded corpus, interleaved round by round; the ratio is what the checks
cost. Run: `python benchmarks/bench_parse.py`.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agentfsm.events import dump_event, parse_event
from agentfsm.events.models import EVENT_ADAPTER
from benchmarks.corpus import build_corpus


def main(events: int = 100_000, rounds: int = 5) -> None:
    """Print events/s for each parser and the ratio between them."""
    lines = [dump_event(e).encode() for run in build_corpus(events) for e in run]
    parsers: dict[str, Callable[[bytes], object]] = {
        "pydantic validate_json (no checks)": EVENT_ADAPTER.validate_json,
        "agentfsm parse_event (strict)": parse_event,
    }
    times: dict[str, list[float]] = {name: [] for name in parsers}
    for _ in range(rounds):
        for name, parse in parsers.items():
            start = time.perf_counter()
            for line in lines:
                parse(line)
            times[name].append(time.perf_counter() - start)
    base = statistics.median(times["pydantic validate_json (no checks)"])
    print(f"corpus: {len(lines):,} lines, median of {rounds} rounds\n")
    print("| parser | events/s | µs each | cost vs validate_json |")
    print("| --- | ---: | ---: | ---: |")
    for name, samples in times.items():
        t = statistics.median(samples)
        print(f"| {name} | {len(lines) / t:,.0f} | {t / len(lines) * 1e6:.2f} | {t / base:.2f}x |")


if __name__ == "__main__":
    main()
