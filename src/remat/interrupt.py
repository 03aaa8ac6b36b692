"""SIGINT (Ctrl-C) and SIGTERM for the `remat` command: delete the temp files being written, print one line and exit
at once (130 / 143), whatever Python is doing — importing torch, inside a weakref callback, where a
KeyboardInterrupt could be swallowed. Light on purpose (the standard library and remat.io): ``remat.__main__``
enters ``exit_on_interrupt`` before it imports the CLI, so a Ctrl-C while torch is still importing exits like one
anywhere else."""

from __future__ import annotations

import contextlib
import os
import signal
import threading

from remat.io import discard_pending


def _stop(signum, frame):
    discard_pending()
    os.write(2, f"remat: interrupted ({signal.Signals(signum).name}); nothing written\n".encode())
    os._exit(128 + signum)


@contextlib.contextmanager
def exit_on_interrupt():
    """While the block runs, SIGINT and SIGTERM stop the process (module docstring); the handlers before it are
    restored afterwards. Main thread only: elsewhere Python cannot set handlers, and the block runs unguarded."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = {sig: signal.signal(sig, _stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
