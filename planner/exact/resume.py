"""A search that goes on where it stopped: run in slices of nodes, its state kept between.

The searches are deterministic, so restarting one under a larger node limit (as
MiniMalloc's round robin does) walks again every node it walked before. Here each search
runs in a thread of its own, one slice of nodes at a time: when its slice is spent, its
`tick` hands control back and the thread waits, recursion and all, until the next slice.
Exactly one thread runs at any time (the caller waits while a slice runs), so results and
node counts are the same on every run; a search that ends within N nodes ends within the
same round as a restarted one would, having spent N nodes instead of the sum of every
earlier round's limit.
"""

from __future__ import annotations

import threading

import numpy as np

from planner.exact.bounded import BoundedSearch, BudgetSpent

_STACK_BYTES = 256 << 20
_stack_lock = threading.Lock()


class _Stopped(BaseException):
    """Unwinds a paused search that is no longer wanted (not an `Exception`: nothing in a
    search may catch it)."""


class Resumable:
    """`search` run a slice at a time by `step`; `close` ends it if it has not ended."""

    def __init__(self, search: BoundedSearch) -> None:
        self.search = search
        self.done = False
        self.offsets: np.ndarray | None = None  # once done: the packing, or None (proven none)
        self._error: BaseException | None = None
        self._spent = False  # ended by the deadline
        self._stop = False
        self._ended = False  # the thread has finished (ended, spent, failed or stopped)
        self._go = threading.Semaphore(0)
        self._back = threading.Semaphore(0)
        self._thread: threading.Thread | None = None
        search.pause = self._pause

    def step(self, until: int) -> bool:
        """Run until the search has spent `until` nodes in all. True when it has ended (see
        `offsets`); raises `BudgetSpent` when the deadline ended it, and any error it raised."""
        if self._ended:
            return self._outcome()
        self.search.node_limit = until
        if self._thread is None:
            self._thread = threading.Thread(target=self._main, name="memplan-exact-search", daemon=True)
            with _stack_lock:
                # A search recurses once or more per placed block, partly through C (all(),
                # generators): give it more stack than a thread's default (2 MiB on some
                # systems), reserved rather than used.
                previous = threading.stack_size(_STACK_BYTES)
                try:
                    self._thread.start()
                finally:
                    threading.stack_size(previous)
        self._go.release()
        self._back.acquire()
        return self._outcome()

    def _outcome(self) -> bool:
        if self._error is not None:
            raise self._error
        if self._spent:
            raise BudgetSpent
        return self.done

    def close(self) -> None:
        """End the thread of a search left paused (nothing happens once it has ended)."""
        thread = self._thread
        if thread is None or not thread.is_alive():
            return
        self._stop = True
        # Still running (the caller was interrupted while it waited): pause at the next node.
        self.search.node_limit = 0
        self._go.release()
        thread.join()

    def _main(self) -> None:
        self._go.acquire()
        try:
            if not self._stop:
                self.offsets = self.search.run()
                self.done = True
        except BudgetSpent:
            self._spent = True
        except _Stopped:
            pass
        except BaseException as e:  # handed to the caller of `step`
            self._error = e
        finally:
            self._ended = True
            self._back.release()

    def _pause(self) -> None:
        """Called by the search's `tick` when its slice is spent: wait for the next one."""
        self._back.release()
        self._go.acquire()
        if self._stop:
            raise _Stopped
