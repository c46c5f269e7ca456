"""``databus repair-log``: report the damaged ranges of a partition's log and cut them out.

    databus repair-log --data-dir DIR --topic T --partition N [--apply]

The way out when the broker logs "damaged batch at byte P" for a partition (fetches that
reach it get CORRUPT_MESSAGE).  Stop the broker first: the tool takes the data directory's
lock and refuses to run while the broker holds it.  Without ``--apply`` it only reports, one
line per damaged range (file, byte range, why, offsets lost), and exits 1 if there is any;
with ``--apply`` it rewrites each damaged segment without those bytes (the indexes are
rebuilt at the broker's next start) and prints the same lines.  Offsets in a cut range are
gone: consumers skip from the last good batch to the next one, as after compaction.
"""

from __future__ import annotations

import os
import sys


def add_arguments(parser) -> None:
    parser.add_argument("--data-dir", required=True, help="the broker's data directory (log.dirs)")
    parser.add_argument("--topic", required=True)
    parser.add_argument("--partition", type=int, required=True)
    parser.add_argument(
        "--apply", action="store_true",
        help="cut the damaged ranges out (default: only report them)",
    )


def run(args) -> int:
    from databus.startup import StartupError, lock_data_dir
    from databus.storage.repair import find_damage, repair

    partition_dir = os.path.join(args.data_dir, f"{args.topic}-{args.partition}")
    if not os.path.isdir(partition_dir):
        print(f"databus repair-log: no partition directory {partition_dir}", file=sys.stderr)
        return 2
    try:
        lock = lock_data_dir(args.data_dir)
    except StartupError as exc:
        print(f"databus repair-log: {exc}; stop the broker first", file=sys.stderr)
        return 1
    with lock:
        damages = find_damage(partition_dir)
        if not damages:
            print(f"{args.topic}-{args.partition}: no damaged batches")
            return 0
        for damage in damages:
            print(damage.describe())
        if not args.apply:
            print(f"{len(damages)} damaged range(s); nothing changed: run again with --apply "
                  "to cut them out")
            return 1
        repair(damages)
        print(f"cut {len(damages)} damaged range(s) out; the broker rebuilds the indexes "
              "at its next start")
        return 0
