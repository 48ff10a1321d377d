"""`barcast promote`: serve a checkpoint now, without waiting for its canary's verdict.

With BARCAST_CANARY on, a new checkpoint forecasts in shadow beside the serving one and serves
once its scores prove it (model.serving.canary). `barcast promote [MODEL_ID]` writes the model
id (default: the newest checkpoint's) to PROMOTE in BARCAST_MODEL_DIR; every forecast worker
watching the directory serves it from each partition's next row, whether its canary is running
or was refused, and records the promotion in its state (a restart keeps it).
"""

from __future__ import annotations

import argparse
import sys

from model.checkpoint import durable_replace
from model.serving.checkpoints import PROMOTE, CheckpointWatcher, model_id_of
from streams.exit_codes import ExitCode
from streams.settings import Settings


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = subparsers.add_parser(
        "promote",
        help="serve a checkpoint without waiting for its canary's verdict",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "model_id", nargs="?", help="the checkpoint's model id (default: the newest's)"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    settings = Settings.from_env()
    if not settings.canary:
        print(
            "barcast promote: BARCAST_CANARY is off, so the forecast workers serve the newest "
            "checkpoint and read no promotion; to serve another, make it the newest in "
            f"{settings.model_dir} (move newer ones out)",
            file=sys.stderr,
        )
        return ExitCode.USAGE
    watcher = CheckpointWatcher(settings.model_dir)
    newest = watcher.newest()
    model_id = args.model_id or (None if newest is None else model_id_of(newest))
    if model_id is None or watcher.find(model_id) is None:
        what = f"of model id {model_id}" if model_id else "at all"
        print(
            f"barcast promote: no checkpoint {what} in {settings.model_dir} "
            "(BARCAST_MODEL_DIR); a checkpoint's config.json records its model id, the first "
            "16 hex digits of weights.sha256",
            file=sys.stderr,
        )
        return ExitCode.FILE_NOT_FOUND
    path = settings.model_dir / PROMOTE
    tmp = path.with_suffix(".tmp")
    try:
        tmp.write_text(model_id + "\n")
        durable_replace(tmp, path)
    except OSError as exc:  # e.g. the model directory mounted read-only in a forecast pod
        if tmp.is_file():
            tmp.unlink()
        print(
            f"barcast promote: cannot write {path} ({exc.strerror}); run it where the model "
            "directory is writable (where checkpoints are put into it)",
            file=sys.stderr,
        )
        return ExitCode.USAGE
    print(f"promote {model_id}: the forecast workers serve it from each partition's next row")
    return ExitCode.OK
