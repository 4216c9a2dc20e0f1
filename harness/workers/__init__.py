"""Worker processes: isolation, the worker's requests, what a variant leaves behind."""
