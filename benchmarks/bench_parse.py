"""What strict parsing costs: `parse_event` next to pydantic's own `validate_json`.

`parse_event` reads text with jiter (refusing repeated keys, NaN and Infinity) and then
validates the object, checking the value limits of `agentfsm.events._bounds`; pydantic's
`validate_json` does neither check (a repeated `sequence` silently keeps the last one). Both
run over the same seeded corpus, interleaved round by round, in CPU time; the ratio (the
median of each round's) is what the checks cost.

Then reading the same corpus as a JSON Lines file: the bounded reader every command goes
through (`agentfsm.events._lines.iter_lines`, one `readline(limit + 2)` a line) next to the
path it replaced (iterating the file and decoding each line, which holds any line whole),
alone and followed by the parse, interleaved round by round likewise (CPU time: the
machine these run on is shared).
Run: `python benchmarks/bench_parse.py`.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agentfsm.events import dump_event, iter_lines, parse_event
from agentfsm.events.models import EVENT_ADAPTER
from benchmarks.corpus import build_corpus


def main(argv: list[str] | None = None) -> int:
    """Print events/s for each parser, then lines/s for each reader, with the ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    lines = [dump_event(e).encode() for run in build_corpus(args.events) for e in run]
    parsers: dict[str, Callable[[bytes], object]] = {
        "pydantic validate_json (no checks)": EVENT_ADAPTER.validate_json,
        "agentfsm parse_event (strict)": parse_event,
    }
    times: dict[str, list[float]] = {name: [] for name in parsers}
    for _ in range(args.rounds):
        for name, parse in parsers.items():
            start = time.process_time()
            for line in lines:
                parse(line)
            times[name].append(time.process_time() - start)
    # The ratio is the median of each round's own ratio, not a ratio of medians: a round's two
    # parsers ran back to back under the same load, which a shared machine moves between rounds.
    base = times["pydantic validate_json (no checks)"]
    print(f"corpus: {len(lines):,} lines, CPU time, median of {args.rounds} rounds\n")
    print("| parser | events/s | µs each | cost vs validate_json |")
    print("| --- | ---: | ---: | ---: |")
    for name, samples in times.items():
        t = statistics.median(samples)
        ratio = statistics.median(s / b for s, b in zip(samples, base, strict=True))
        print(f"| {name} | {len(lines) / t:,.0f} | {t / len(lines) * 1e6:.2f} | {ratio:.2f}x |")
    print()
    bench_reading(lines, args.rounds)
    return 0


def _whole_lines(handle: IO[bytes]) -> Iterator[str]:
    """The reader `iter_lines` replaced: each line whole, however long, then decoded."""
    for raw in handle:
        yield raw.decode("utf-8")


READERS: dict[str, Callable[[IO[bytes]], Iterator[str]]] = {
    "file iteration + decode (unbounded, before)": _whole_lines,
    "iter_lines (bounded)": iter_lines,
}


def bench_reading(lines: list[bytes], rounds: int) -> None:
    """Print lines/s reading `lines` from a file, each reader alone and with the parse."""
    times: dict[tuple[str, bool], list[float]] = {
        (name, parse): [] for parse in (False, True) for name in READERS
    }
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "log.jsonl"
        path.write_bytes(b"".join(line + b"\n" for line in lines))
        for _ in range(rounds):
            for (name, parse), samples in times.items():
                with path.open("rb") as handle:
                    start = time.process_time()
                    if parse:
                        for text in READERS[name](handle):
                            parse_event(text)
                    else:
                        for _text in READERS[name](handle):
                            pass
                    samples.append(time.process_time() - start)
    print(
        f"reading the corpus from a file: {len(lines):,} lines, CPU time, median of {rounds} "
        "rounds\n"
    )
    print("| reader | then | lines/s | µs each | time vs before |")
    print("| --- | --- | ---: | ---: | ---: |")
    before = next(iter(READERS))
    for (name, parse), samples in times.items():
        t = statistics.median(samples)
        ratio = statistics.median(s / b for s, b in zip(samples, times[before, parse], strict=True))
        then = "parse_event" if parse else "nothing"
        print(
            f"| {name} | {then} | {len(lines) / t:,.0f} | {t / len(lines) * 1e6:.2f} "
            f"| {ratio:.2f}x |"
        )


if __name__ == "__main__":
    raise SystemExit(main())
