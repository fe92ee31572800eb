"""The triggerer: deferred tasks' and asset watchers' triggers, claimed from the
database (``job``, ``claims``) and run on one event loop in a child (``runner``)."""
