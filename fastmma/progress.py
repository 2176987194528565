"""Progress bars for the command line and Dask jobs, drawn by tqdm.

A bar draws in place on a terminal.  Into a pipe or a log it never redraws with ``\\r``:
``show="auto"`` prints nothing there, ``show="always"`` prints a plain line now and then.
Nothing here changes what is computed.
"""

from __future__ import annotations

import sys
import threading
from contextlib import contextmanager

from tqdm import tqdm

SHOW_CHOICES = ("auto", "always", "never")
PIPE_INTERVAL = 5.0  # seconds between two lines of a bar in a pipe


class LineBar(tqdm):
    """A tqdm bar for a pipe or a log: each refresh is a line of its own, never a redraw."""

    def display(self, msg=None, pos=None):
        """Print the bar's state as a line of its own (tqdm's request to clear a line does nothing)."""
        if msg == "":  # tqdm's request to clear the line: nothing to clear in a pipe
            return False
        self.fp.write((self.__str__() if msg is None else msg) + "\n")
        self.fp.flush()
        return True

    def close(self):
        """Print the final state once, then close without tqdm's own final redraw."""
        if not self.disable and self.last_print_n != self.n:
            self.display()  # the final state, once: tqdm itself would draw it and then add a blank line
        self.leave = False
        super().close()


def is_terminal(stream) -> bool:
    """Whether ``stream`` is an interactive terminal (False for pipes, files and captured streams)."""
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def make_bar(desc: str, *, total: int | None = None, unit: str = "it", show: str = "auto", stream=None,
             **options) -> tqdm:
    """A tqdm bar on ``stream`` (default ``sys.stderr``), or a disabled one that prints nothing.

    ``show``: ``"auto"`` draws in place on a terminal and prints nothing into a pipe;
    ``"always"`` draws on a terminal and prints a line every :data:`PIPE_INTERVAL` seconds
    into a pipe; ``"never"`` prints nothing.  Raises ``ValueError`` for another ``show``.
    Use it as a context manager so that the bar closes::

        with make_bar("conform", total=3, unit="file") as bar: bar.update()
    """
    if show not in SHOW_CHOICES:
        raise ValueError(f"show must be one of {', '.join(SHOW_CHOICES)}, got {show!r}")
    stream = sys.stderr if stream is None else stream
    terminal = is_terminal(stream)
    if show == "never" or (show == "auto" and not terminal):
        return tqdm(total=total, disable=True)
    cls, interval = (tqdm, 0.1) if terminal else (LineBar, PIPE_INTERVAL)
    return cls(total=total, desc=desc, unit=unit, file=stream, mininterval=interval, dynamic_ncols=terminal,
               **options)


def as_callback(bar: tqdm):
    """``progress(done, total)``, as :func:`fastmma.matmul` and :func:`fastmma.dask.run_gemm_on_cluster`
    call it, moving ``bar`` to ``done`` of ``total``."""

    def progress(done: int, total: int) -> None:
        if bar.total != total:
            bar.total = total
        bar.update(done - bar.n)

    return progress


@contextmanager
def while_running(desc: str, *, show: str = "auto", stream=None, after: float = 2.0):
    """Show ``desc`` and the seconds elapsed while the block runs, if it runs longer than
    ``after`` seconds (numba's first compile of a kernel: tens of seconds; a load from its
    cache: well under ``after``).  On a terminal the seconds tick in place; into a pipe
    (``show="always"``) a line says what is running, and another when it is done."""
    done = threading.Event()

    def tick():
        if done.wait(after):
            return
        with make_bar(desc, show=show, stream=stream, bar_format="{desc} {elapsed}") as bar:
            if bar.disable:
                return
            while not done.wait(bar.mininterval):
                bar.refresh()
            bar.update()  # so that a bar in a pipe prints its final line

    thread = threading.Thread(target=tick, name="fastmma-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
