"""Executor workers (role ``executor-worker``): each supervises one task at a time.

This package imports nothing itself: the task runner imports no module of it.
"""
