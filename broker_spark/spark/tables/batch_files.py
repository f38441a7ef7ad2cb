"""A micro-batch's staged files placed in a table's folder, the same files on every retry.

The fast paths into Delta and Iceberg (:mod:`.delta_commit`, :mod:`.iceberg_commit`)
commit files the tasks wrote under the checkpoint: the driver moves them into the
table's folder first, then commits them. A driver can die between the two; the batch
then runs again, and the files the first attempt moved are no longer where the tasks
wrote them. So the list of the batch's files is saved before the first move and read
back on a retry: every file of the batch is committed, once (the commit is skipped when
the table holds the batch).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Sequence

__all__ = ["forget_through", "place_batch_files"]


def place_batch_files(
    plan_file: str, batch_id: int, staged: Sequence[tuple[str, str]], location: str
) -> list[str]:
    """Move the files under the ``staged`` folders (``(tag, folder)``, each holding
    ``day=...`` folders) into the same folders under ``location``, named after the
    batch and tag; their paths relative to ``location``. ``plan_file`` keeps the list
    across attempts."""
    if os.path.exists(plan_file):
        with open(plan_file, encoding="utf-8") as f:
            plan = [(source, relative) for source, relative in json.load(f)]
    else:
        plan = []
        for tag, root in staged:
            prefix = f"b{batch_id:012d}-{tag}-"
            for folder, _dirs, files in os.walk(root):
                relative = os.path.relpath(folder, root)
                for file in sorted(files):
                    if not file.startswith(("_", ".")):
                        target = os.path.normpath(os.path.join(relative, prefix + file))
                        plan.append((os.path.join(folder, file), target))
        os.makedirs(os.path.dirname(plan_file), exist_ok=True)
        partial = plan_file + ".partial"
        with open(partial, "w", encoding="utf-8") as f:
            json.dump(plan, f)
        os.replace(partial, plan_file)
    for source, relative in plan:
        target = os.path.join(location, relative)
        if not os.path.exists(target):  # else moved before the batch was interrupted
            os.makedirs(os.path.dirname(target), exist_ok=True)
            os.replace(source, target)
    return [relative for _source, relative in plan]


def forget_through(folder: str, batch_id: int) -> None:
    """Drop the file lists (``batch-N.json`` in ``folder``) of batches up to ``batch_id``
    (committed: Spark starts batch N+1 only once N is in its commit log)."""
    if not os.path.isdir(folder):
        return
    for entry in os.listdir(folder):
        number = entry[len("batch-") : -len(".json")]
        named = entry.startswith("batch-") and entry.endswith(".json") and number.isdigit()
        if named and int(number) <= batch_id:
            with contextlib.suppress(FileNotFoundError):
                os.remove(os.path.join(folder, entry))
