"""The last module a run's forkserver imports (isolation._FORKSERVER_PRELOAD): it freezes what the imports
before it made (timing.freeze_imports: torch's and the harness's ~170k objects), so that every worker forked
from the server starts with them in the collector's permanent generation. A worker's own freeze_imports
then collects only what it made since (a few ms, not 80), and its pages of those objects stay shared with
the server (a collection that scans an object writes to it).

It also makes the server a subreaper (harness.workers.children.become_subreaper): a process a variant
detaches after switching its own worker's flag off lands here, not on init, and the parent kills it
(children.kill_adopted). The server collects such a child's exit status without the warning multiprocessing
would print on the user's terminal for a pid it did not start.

And as the server ends (its run process is gone: killed outright, its own clean-up never ran), it kills its
workers with everything below them (children.end_below), so that what a variant detached runs on nowhere."""

import atexit
import os
import warnings

from attnbench.harness.measure.timing import freeze_imports
from attnbench.harness.workers.children import become_subreaper, end_below

FROZEN = freeze_imports()
SUBREAPER = become_subreaper()
atexit.register(end_below, os.getpid())
warnings.filterwarnings("ignore", message="forkserver: waitpid returned unexpected pid")
