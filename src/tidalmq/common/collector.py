"""The garbage collector of a server process (the standalone, the broker, the schedule process).

Called once start-up is over: what start-up built (configs, tables, mapped files, a loaded timer wheel's
bookkeeping) is moved out of the collector's sight, and the collector runs less often. A message's path
allocates a few short-lived containers; with the default thresholds the collector ran thousands of times
a second, and every full collection walked everything start-up left behind while the process stood still
(in the schedule process a full collection held back timer deliveries ~12 ms: docs/benchmarks.md,
"Timer deliveries dispatched where they are stored").
"""

from __future__ import annotations

import gc

# Objects allocated (less those freed) before a young collection; young collections before a middle one;
# middle ones before a full one (which also waits until the survivors grew by a quarter).
THRESHOLDS = (50_000, 20, 100)


def settle_after_start() -> None:
    gc.collect()
    gc.freeze()
    gc.set_threshold(*THRESHOLDS)
