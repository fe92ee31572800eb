"""Last in every forkserver's preload: it freezes what the preload made.

CPython's cyclic collector writes to the header of every object it tracks when it
runs. In a process forked from a server, the first collection would therefore copy
every page that holds one of the server's preloaded objects, and each child would end
up with a private copy of the preload it was meant to share. ``gc.freeze()`` moves
those objects to a generation the collector never visits, so the pages stay shared
(CPython's documentation advises it before forking). A server forked from another one
freezes its own preload in :func:`spawnflow.bootstrap.subservers.serve`.
"""

import gc

gc.freeze()
