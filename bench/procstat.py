"""CPU time of a process, for benchmarks that report CPU per call next to throughput.

On a shared machine a process's rate moves with its neighbours' load; the CPU it spends per
call moves much less (it is what it costs, not how fast it got its turn), so benchmarks
quote both.
"""

from __future__ import annotations

import os
from pathlib import Path


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far, all its threads (Linux /proc); 0.0 when
    the process is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
