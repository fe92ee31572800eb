"""The bootstrap layer: settings, logging, per-process ORM, start methods, launcher, platform.

Imports nothing else from spawnflow. Import the submodules you need; this package
imports none of them itself, so a child pays only for what it uses.
"""
