"""Running one callable from several threads at once, as several workers would (the claim tests)."""

from __future__ import annotations

import threading
from collections.abc import Callable


def at_once(work: Callable[[], object], *, threads: int = 2, timeout_s: float = 120) -> list[BaseException]:
    """Run `work` in `threads` threads started together; return what any of them raised."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            work()
        except Exception as exc:  # reported to the caller, which asserts there is none
            errors.append(exc)

    started = [threading.Thread(target=run) for _ in range(threads)]
    for thread in started:
        thread.start()
    for thread in started:
        thread.join(timeout=timeout_s)
    return errors
