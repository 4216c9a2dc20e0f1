"""The first module a run's forkserver imports (isolation._FORKSERVER_PRELOAD): Ctrl-C is ignored there from
now on. A terminal's Ctrl-C signals the whole process group, the forkserver too, and it was Python's to
handle while the server imported torch (multiprocessing ignores it only once its preloads are done): a
Ctrl-C in a run's first seconds printed the server's KeyboardInterrupt traceback under the run's own
'interrupted' line. The parent stops the run and kills its workers; a worker forked from the server starts
with Ctrl-C ignored as well (harness.workers.worker ignores it again as it starts), so the gap between the
fork and that is closed too."""

import signal

signal.signal(signal.SIGINT, signal.SIG_IGN)
