"""The first module a run's forkserver imports (isolation._FORKSERVER_PRELOAD): Ctrl-C ignored there for good.
A terminal's Ctrl-C signals the whole process group, the forkserver too, and it was Python's to handle while
the server started and imported torch (multiprocessing ignores it only once its preloads are done): a Ctrl-C
in a run's first seconds printed the server's KeyboardInterrupt traceback under the run's own 'interrupted'
line. The parent starts the server with Ctrl-C blocked (harness.workers.interrupts.blocked_for_children), so
that one sent meanwhile waits; here it is ignored for good, which discards one waiting, and unblocked, so that
a worker forked from the server, and what the worker starts, inherit no blocked signal. The parent stops the
run and kills its workers; a worker forked from the server starts with Ctrl-C ignored as well
(harness.workers.worker ignores it again as it starts)."""

import signal

signal.signal(signal.SIGINT, signal.SIG_IGN)
if hasattr(signal, "pthread_sigmask"):
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
