"""Whether writes to the data directory are failing (disk full, read-only, I/O errors), said
once per episode instead of once per request.

The first failed append or fsync logs one ERROR naming the directory and the errno; every
later failure only counts; the first write that succeeds again logs one INFO with the count.
Meanwhile producers get KAFKA_STORAGE_ERROR and nothing half-written stays visible (the
segment cuts a failed append back).  The counters are metrics (see the broker's
``/metrics``).  No trio, no I/O of its own.
"""

from __future__ import annotations

import errno as errno_names
import logging
import os

log = logging.getLogger(__name__)


class StorageHealth:
    def __init__(self, data_dir: str | os.PathLike) -> None:
        self.data_dir = str(data_dir)
        self.failing_errno: int | None = None  # set while writes fail
        self.failed_writes = 0  # appends and fsyncs that failed, ever
        self.episodes = 0  # times writes started failing

    @property
    def failing(self) -> bool:
        return self.failing_errno is not None

    def failed(self, exc: BaseException) -> None:
        self.failed_writes += 1
        if self.failing_errno is not None:
            return
        code = getattr(exc, "errno", None) or -1
        self.failing_errno = code
        self.episodes += 1
        name = errno_names.errorcode.get(code, str(code))
        log.error("%s: writes are failing (errno %s %s: %s); producers get "
                  "KAFKA_STORAGE_ERROR until a write succeeds again",
                  self.data_dir, code, name, exc)

    def succeeded(self) -> None:
        if self.failing_errno is None:
            return
        self.failing_errno = None
        log.info("%s: writes succeed again (%d failed writes in all so far)",
                 self.data_dir, self.failed_writes)
