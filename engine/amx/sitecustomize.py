"""Ask Linux for permission to use AMX tiles, in every Python process of the CPU engine.

Linux lets a process execute AMX instructions only after it asked for the tile state
(``arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)``); without it the first AMX
instruction kills the process with SIGILL. vLLM's CPU build runs its own AMX attention
kernel on CPUs that have AMX, and relies on oneDNN having asked first. oneDNN asks only
when it picks an AMX matmul, which it does not for a very short prompt: on this project's
machines an engine whose first request was a 3-token prompt lost its worker to SIGILL
(exit code -4) every time, and served normally with this file in place.

launch_vllm.sh puts this directory first on PYTHONPATH for the CPU engine on x86-64 CPUs
with AMX, so Python imports this module at start-up in the API server, the engine core
and the workers. It does nothing else, and never fails a start-up.
"""

import ctypes
import platform

SYS_ARCH_PRCTL = 158  # x86-64
ARCH_REQ_XCOMP_PERM = 0x1023
XFEATURE_XTILEDATA = 18

if platform.system() == "Linux" and platform.machine() == "x86_64":
    try:
        ctypes.CDLL(None, use_errno=True).syscall(SYS_ARCH_PRCTL, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)
    except (AttributeError, OSError):
        pass
