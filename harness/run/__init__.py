"""Running a sweep: the runner, the plan of visits, the executors, progress and estimates."""
