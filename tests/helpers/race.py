"""Run the same call from several threads at once and collect who won."""

from __future__ import annotations

import threading
from collections.abc import Callable


def race(call: Callable[[], object], losing: type[BaseException], racers: int = 4) -> list[str]:
    """Start ``racers`` threads together on ``call``; returns sorted "won"/"lost" outcomes."""
    outcomes: list[str] = []
    start = threading.Barrier(racers)

    def run() -> None:
        start.wait()
        try:
            call()
            outcomes.append("won")
        except losing:
            outcomes.append("lost")

    threads = [threading.Thread(target=run) for _ in range(racers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sorted(outcomes)
