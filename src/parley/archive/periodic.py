"""The worker's archive pass, every ``archive.interval_seconds`` when ``archive.periodic``.

Several workers may each run it: two passes over one chat write the same object, and only
one of them moves the chat (``store.archives.mark_archived`` is conditional)."""

from __future__ import annotations

import asyncio
import logging

from parley.archive.archiver import Archiver
from parley.blobs.settings import ArchiveSettings

log = logging.getLogger(__name__)


async def archive_forever(archiver: Archiver, settings: ArchiveSettings) -> None:
    while True:
        await asyncio.sleep(settings.interval_seconds)
        try:
            report = await archiver.archive_due()
        except Exception:  # a database or store outage: the next pass tries again
            log.exception("archive pass failed")
            continue
        if report.archived or report.failed:
            log.info(
                "archive pass: %d chats archived (%d bytes), %d skipped, %d failed",
                report.archived,
                report.bytes,
                report.skipped,
                report.failed,
            )
