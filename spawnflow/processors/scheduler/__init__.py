"""The scheduler (role ``scheduler``): Dag runs, task instance states, the executor."""
