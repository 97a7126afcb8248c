"""A progress line on stderr while something slow runs (compiling, loading
weights), only when stderr is a terminal (or K3_PROGRESS=1; K3_PROGRESS=0
turns it off)."""
from __future__ import annotations

import os
import sys
import threading
import time
from typing import Optional


def enabled(flag: Optional[bool] = None) -> bool:
    if flag is not None:
        return flag
    env = os.environ.get("K3_PROGRESS")
    if env in ("0", "1"):
        return env == "1"
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


class Progress:
    """``with Progress("compiling tiny"):`` redraws ``compiling tiny [=====   ]
    3.2 s`` every 0.1 s (a bouncing bar: the steps inside are one call),
    and clears the line at the end. Once ``update(done, total)`` is called
    (loading weights: bytes) the bar fills up instead, with GB/s."""

    def __init__(self, label: str, show: Optional[bool] = None):
        self.label = label
        self.show = enabled(show)
        self._stop = threading.Event()
        self._t: Optional[threading.Thread] = None
        self._done: Optional[tuple] = None  # (done, total) from update()

    def update(self, done: int, total: int) -> None:
        self._done = (done, total)

    def _line(self, i: int, width: int, seconds: float) -> str:
        if self._done is None:
            pos = i % (2 * (width - 5))
            pos = pos if pos < width - 5 else 2 * (width - 5) - pos
            bar = " " * pos + "=====" + " " * (width - 5 - pos)
            return f"\r{self.label} [{bar}] {seconds:.1f} s"
        done, total = self._done
        filled = int(width * done / total) if total else width
        rate = done / seconds / 1e9 if seconds > 0 else 0.0
        return (f"\r{self.label} [{'=' * filled}{' ' * (width - filled)}] "
                f"{done / 1e9:.1f} / {total / 1e9:.1f} GB ({rate:.1f} GB/s)")

    def _run(self) -> None:
        t0 = time.monotonic()
        width, i = 20, 0
        while not self._stop.wait(0.1):
            sys.stderr.write(self._line(i, width, time.monotonic() - t0))
            sys.stderr.flush()
            i += 1

    def __enter__(self) -> "Progress":
        if self.show:
            self._t = threading.Thread(target=self._run, daemon=True)
            self._t.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._t:
            self._stop.set()
            self._t.join()
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()
