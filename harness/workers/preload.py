"""The last module a run's forkserver imports (isolation._FORKSERVER_PRELOAD): it freezes what the imports
before it made (timing.freeze_imports: torch's and the harness's ~170k objects), so that every worker forked
from the server starts with them in the collector's permanent generation. A worker's own freeze_imports
then collects only what it made since (a few ms, not 80), and its pages of those objects stay shared with
the server (a collection that scans an object writes to it)."""

from attnbench.harness.measure.timing import freeze_imports

FROZEN = freeze_imports()
