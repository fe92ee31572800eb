"""The Windows calls spawnflow makes: job objects, the console's Ctrl-C, C runtime handles.

Defined on Windows only, through ctypes (no pywin32 dependency). Callers test
``sys.platform`` first; type checkers for Linux and macOS narrow on it and skip this.
"""

from __future__ import annotations

import sys
from typing import Any

if sys.platform == "win32":
    import ctypes
    import msvcrt
    import os
    from collections.abc import Iterator
    from contextlib import contextmanager
    from ctypes import wintypes

    _kernel32 = ctypes.WinDLL("kernel32", use_last_error=True)

    # JOBOBJECTINFOCLASS JobObjectExtendedLimitInformation, and the limit that makes
    # closing the job's last handle terminate every process in it.
    _JOB_OBJECT_EXTENDED_LIMIT_INFORMATION = 9
    _JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE = 0x2000

    class _IoCounters(ctypes.Structure):
        _fields_ = [
            (name, ctypes.c_ulonglong)
            for name in (
                "ReadOperationCount", "WriteOperationCount", "OtherOperationCount",
                "ReadTransferCount", "WriteTransferCount", "OtherTransferCount",
            )
        ]  # fmt: skip

    class _BasicLimits(ctypes.Structure):
        _fields_ = [
            ("PerProcessUserTimeLimit", ctypes.c_int64),
            ("PerJobUserTimeLimit", ctypes.c_int64),
            ("LimitFlags", wintypes.DWORD),
            ("MinimumWorkingSetSize", ctypes.c_size_t),
            ("MaximumWorkingSetSize", ctypes.c_size_t),
            ("ActiveProcessLimit", wintypes.DWORD),
            ("Affinity", ctypes.c_size_t),
            ("PriorityClass", wintypes.DWORD),
            ("SchedulingClass", wintypes.DWORD),
        ]

    class _ExtendedLimits(ctypes.Structure):
        _fields_ = [
            ("BasicLimitInformation", _BasicLimits),
            ("IoInfo", _IoCounters),
            ("ProcessMemoryLimit", ctypes.c_size_t),
            ("JobMemoryLimit", ctypes.c_size_t),
            ("PeakProcessMemoryUsed", ctypes.c_size_t),
            ("PeakJobMemoryUsed", ctypes.c_size_t),
        ]

    _kernel32.CreateJobObjectW.argtypes = (ctypes.c_void_p, wintypes.LPCWSTR)
    _kernel32.CreateJobObjectW.restype = wintypes.HANDLE
    _kernel32.SetInformationJobObject.argtypes = (
        wintypes.HANDLE, ctypes.c_int, ctypes.c_void_p, wintypes.DWORD,
    )  # fmt: skip
    _kernel32.SetInformationJobObject.restype = wintypes.BOOL
    _kernel32.AssignProcessToJobObject.argtypes = (wintypes.HANDLE, wintypes.HANDLE)
    _kernel32.AssignProcessToJobObject.restype = wintypes.BOOL
    _kernel32.GetCurrentProcess.restype = wintypes.HANDLE
    _kernel32.CloseHandle.argtypes = (wintypes.HANDLE,)
    _kernel32.SetConsoleCtrlHandler.argtypes = (ctypes.c_void_p, wintypes.BOOL)
    _kernel32.SetConsoleCtrlHandler.restype = wintypes.BOOL

    #: This process's job, kept open for as long as the process lives: the handle closes
    #: when the process ends however it ends, and the job then kills what is left in it.
    _job: Any = None

    def enter_kill_on_close_job() -> bool:
        """Put this process, and every process it starts from now on, in a new job object
        that terminates them all when this process ends. False if Windows refused."""
        global _job
        if _job is not None:
            return True
        job = _kernel32.CreateJobObjectW(None, None)
        if not job:
            return False
        limits = _ExtendedLimits()
        limits.BasicLimitInformation.LimitFlags = _JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE
        configured = _kernel32.SetInformationJobObject(
            job, _JOB_OBJECT_EXTENDED_LIMIT_INFORMATION, ctypes.byref(limits),
            ctypes.sizeof(limits),
        )  # fmt: skip
        # Jobs nest since Windows 8, so this works inside a CI runner's or a service's job.
        if not configured or not _kernel32.AssignProcessToJobObject(
            job, _kernel32.GetCurrentProcess()
        ):
            _kernel32.CloseHandle(job)
            return False
        _job = job
        return True

    #: Whether this process ignores the console's Ctrl-C for good (a spawnflow child).
    _shielded = False

    def ignore_console_ctrl_c() -> None:
        """The console no longer delivers Ctrl-C to this process or to the processes it
        starts (they inherit the setting); ``raise(SIGINT)`` still reaches our handler."""
        global _shielded
        _kernel32.SetConsoleCtrlHandler(None, True)
        _shielded = True

    @contextmanager
    def children_born_ignoring_ctrl_c() -> Iterator[None]:
        """Processes created meanwhile ignore the console's Ctrl-C from their first
        instruction: a child still booting cannot be ended by one. A Ctrl-C pressed in
        these few milliseconds does not reach this process either."""
        if _shielded:
            yield
            return
        _kernel32.SetConsoleCtrlHandler(None, True)
        try:
            yield
        finally:
            _kernel32.SetConsoleCtrlHandler(None, False)

    def descriptor_for(handle: int) -> int:
        """A C runtime file descriptor for a pipe handle, so ``os.dup2`` can use it."""
        return msvcrt.open_osfhandle(handle, os.O_WRONLY)
