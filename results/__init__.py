"""What was measured: run directories (meta.json + rows.jsonl), their schema, and a pandas loader.

`results/reference/` holds runs published with the repository; new runs go to `runs/` (git-ignored).
"""

if __name__ != "attnbench.results":  # the folder imported by its own name, which attnbench 0.2 removed
    raise ImportError(
        f"{__name__} is now attnbench.results: write `from attnbench import results`", name="results"
    )

from .load import (
    export,
    load,
    load_meta,
    load_numerics,
    machine_label,
    scalar_records,
    tile_failed,
    tile_sentences,
    tile_wrong,
)
from .schema import COLUMNS, SCHEMA_VERSION, STATUSES
from .store import (
    RowWarning,
    RunDirError,
    RunWriter,
    UncollectedWarning,
    is_run_dir,
    merge_shards,
    read_meta,
    read_rows,
)

__all__ = [
    "COLUMNS",
    "SCHEMA_VERSION",
    "STATUSES",
    "RowWarning",
    "RunDirError",
    "RunWriter",
    "UncollectedWarning",
    "export",
    "is_run_dir",
    "load",
    "load_meta",
    "load_numerics",
    "machine_label",
    "merge_shards",
    "read_meta",
    "read_rows",
    "scalar_records",
    "tile_failed",
    "tile_sentences",
    "tile_wrong",
]
