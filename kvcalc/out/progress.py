"""Progress bars on stderr for runs that can take over a second (trace replays, tiers, ``compare --trace``, sweeps,
``bench``).

The core never prints: the trace reader passes each file it opens to :func:`watch`, a loop over points passes
its iterable to :func:`track`, and a simulation asks :func:`counter` for a callback to count what it finished. Both hand their argument back unchanged unless the CLI is showing a bar
(``with progress.shown("trace replay"):``), which it does only when stderr is a terminal and ``kvcalc --quiet``
was not given; so piped, redirected, in-process (tests) and library runs cost one global lookup per file or loop.
When a bar is shown, a watched file reports the bytes read (its size is the total) and a tracked loop the items
done; rich is imported only then. The bar is transient: it is erased when the work ends, before the output.
"""

from __future__ import annotations

import sys
from contextlib import contextmanager

QUIET = False  # kvcalc --quiet: never show a bar
_bar = None  # the _Bar being shown, or None


def watch(handle):
    """``handle`` (a binary file open for reading) as the trace reader should read it: itself when no bar is shown,
    else a wrapper whose reads advance the bar by their bytes."""
    if _bar is None:
        return handle
    return _bar.file(handle)


def track(items, what: str = "points"):
    """``items`` (a sized iterable) as a loop should iterate it: itself when no bar is shown, else advancing
    the bar by one per item."""
    if _bar is None:
        return items
    return _bar.items(items, what)


def counter(total: int, what: str = "requests"):
    """A callback ``tick(n=1)`` that advances the bar by ``n`` of ``total`` items, or None when no bar is shown
    (then the caller skips the call: one None check per item)."""
    if _bar is None:
        return None
    return _bar.counter(total, what)


def enabled(stream=None) -> bool:
    """Whether a bar would be shown on ``stream`` (default: stderr): a terminal, and not --quiet."""
    stream = sys.stderr if stream is None else stream
    try:
        return not QUIET and stream.isatty()
    except (AttributeError, ValueError):  # a closed or fake stream
        return False


@contextmanager
def shown(what: str, stream=None):
    """Show a bar named ``what`` on ``stream`` (default: stderr) while the block runs, if :func:`enabled`."""
    global _bar
    if not enabled(stream) or _bar is not None:  # nested: the outer bar goes on
        yield
        return
    _bar = _Bar(what, sys.stderr if stream is None else stream)
    try:
        yield
    finally:
        bar, _bar = _bar, None
        bar.close()


class _Bar:
    """One rich Progress on a stream; a task per watched file (pass 1, 2... of the same file) or tracked loop."""

    def __init__(self, what: str, stream):
        self.what = what
        self.stream = stream
        self.progress = None
        self.passes = 0

    def _start(self):
        if self.progress is None:
            from rich.console import Console
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

            self.progress = Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.fields[done]}"),
                                     TimeElapsedColumn(), TimeRemainingColumn(),
                                     console=Console(file=self.stream), transient=True)
            self.progress.start()
        return self.progress

    def _task(self, description: str, total):
        progress = self._start()
        for task in progress.tasks:  # one line at a time: the finished pass gives way to the next
            progress.update(task.id, visible=False)
        return progress.add_task(description, total=total, done="")

    def file(self, handle):
        import os

        try:
            total = os.fstat(handle.fileno()).st_size or None
        except (OSError, AttributeError, ValueError):
            total = None
        self.passes += 1
        name = os.path.basename(getattr(handle, "name", "") or "trace")
        label = f"{self.what}: {name}" + (f" (pass {self.passes})" if self.passes > 1 else "")
        return _Counted(handle, self, self._task(label, total))

    def items(self, items, what: str):
        try:
            total = len(items)
        except TypeError:
            total = None
        task = self._task(f"{self.what}: {what}", total)
        for n, item in enumerate(items, 1):
            yield item
            self.advance(task, 1, f"{n:,}/{total:,}" if total else f"{n:,}")

    def counter(self, total: int, what: str):
        task, done = self._task(f"{self.what}: {what}", total), [0]

        def tick(n: int = 1) -> None:
            done[0] += n
            self.advance(task, n, f"{done[0]:,}/{total:,}")

        return tick

    def advance(self, task, amount: int, done: str) -> None:
        self.progress.update(task, advance=amount, done=done)

    def close(self) -> None:
        if self.progress is not None:
            self.progress.stop()


class _Counted:
    """A binary file whose reads advance a bar task by their bytes (everything else is the file's own)."""

    def __init__(self, handle, bar: _Bar, task):
        self._handle, self._bar, self._task, self._read = handle, bar, task, 0

    def read(self, size: int = -1) -> bytes:
        data = self._handle.read(size)
        self._read += len(data)
        self._bar.advance(self._task, len(data), f"{self._read / 1e6:,.1f} MB")
        return data

    def __enter__(self):
        self._handle.__enter__()
        return self

    def __exit__(self, *exc):
        return self._handle.__exit__(*exc)

    def __getattr__(self, name):
        return getattr(self._handle, name)
