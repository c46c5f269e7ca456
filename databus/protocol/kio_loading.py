"""Load kio (the Kafka schema library protocol/ builds on) without its test strategies.

kio imports hypothesis at import time whenever it is installed, only to register hypothesis
strategies for its types.  hypothesis brings pytest along: in an environment with test tools
installed that is 0.5–1 s added to the start of every ``databus`` command, broker and sidecar
(several seconds on a busy machine).  No ``databus`` command uses those strategies, so the
command line loads kio with hypothesis hidden; a process that already imported hypothesis
(pytest with the hypothesis plugin) or kio is left exactly as it is.
"""

from __future__ import annotations

import sys

_HIDDEN = ("hypothesis", "hypothesis.strategies")


def load_kio_without_test_strategies() -> None:
    if "kio" in sys.modules or any(name in sys.modules for name in _HIDDEN):
        return
    for name in _HIDDEN:
        sys.modules[name] = None  # type: ignore[assignment]  # makes `import` raise ImportError
    try:
        # kio's phantom types look for hypothesis once, when their base module is imported
        import kio.static.primitive  # noqa: F401
    finally:
        for name in _HIDDEN:
            if name in sys.modules and sys.modules[name] is None:
                del sys.modules[name]
