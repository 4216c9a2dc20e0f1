"""The default executor: every cell, one after another, in one worker process on this machine."""

from __future__ import annotations

from ..cellrunner import CellRunner, SkipAhead, precheck
from ..spec import SweepSpec
from .base import OnDevice, OnRow, Plan


class LocalExecutor:
    name = "local"

    def check(self, sweep: SweepSpec) -> None:
        return None

    def run(self, plan: Plan, on_row: OnRow, on_device: OnDevice) -> None:
        skip = SkipAhead(plan.done)
        runner = plan.local or CellRunner(plan.config, plan.sweep.settings)
        interrupted = False
        try:
            for spec in plan.cells:
                row = precheck(spec, skip) or runner.run(spec)
                skip.note(spec, row["status"])
                on_row(row)
        except KeyboardInterrupt:
            interrupted = True
            raise
        finally:
            if runner is not plan.local:  # the runner closes its own
                runner.close(kill=interrupted)
