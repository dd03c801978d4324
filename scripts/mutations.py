"""Do the tests named for a property catch the one-line bug that would break it?

    .venv/bin/python scripts/mutations.py                 # every mutation, once
    .venv/bin/python scripts/mutations.py --runs 3        # each test run 3 times per mutation
    .venv/bin/python scripts/mutations.py M1 M4 --runs 5  # some of them
    .venv/bin/python scripts/mutations.py --list

Each mutation replaces one piece of code (the ``old`` text, which must occur in the file)
with a broken one, runs the tests named for the property it breaks (``-p no:randomly``,
serially, on SQLite and Postgres as the tests choose), puts the file back, and reports how
many of the runs failed: ``caught 3/3``. A mutation a test misses is a test that does not
prove its name. The file is restored even when the run is interrupted. Not part of CI (it
takes minutes a mutation); run it before calling a property proven, and name the figures.

Postgres for the tests: ``PARLEY_TEST_POSTGRES_URL`` (default the local ``test`` database);
nothing else may be using those databases meanwhile. The mutated file is in the work tree
while its tests run: commit nothing meanwhile (a ``git add -A`` would take the mutation).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Mutation:
    id: str
    what: str
    path: str
    old: str
    new: str
    tests: tuple[str, ...]


_WRITE = (
    "        await self.write(key, data)\n"
    '        crash_point("archive.written")\n'
    "        await self.verify(key, data)\n"
)
_MARK = (
    "        async with self.db.transaction() as s:\n"
    "            marked = await archives.mark_archived(s, snapshot, key=key, size=len(data))\n"
    '        crash_point("archive.marked")\n'
)
_WRITE_THEN_MARK = _WRITE + _MARK
_MARK_THEN_WRITE = _MARK + _WRITE

MUTATIONS = (
    # -- issue 40's findings
    Mutation(
        "M1",
        "the finisher gives up instead of retrying while the database is away",
        "src/parley/runs/finisher.py",
        "                if outage(e) is None:  # a fault of the write itself: retrying "
        "cannot help\n                    raise",
        "                raise",
        (
            "tests/faults/test_failover.py::test_two_failovers_under_load_lose_nothing_and_answer_no_500",
        ),
    ),
    Mutation(
        "M2",
        "the Idempotency-Key is ignored on sends",
        "src/parley/api/routes/runs.py",
        "    run = await svc.submitter.submit(who, chat_id, _send_request(body), idempotency_key)",
        "    run = await svc.submitter.submit(who, chat_id, _send_request(body), None)",
        (
            "tests/faults/test_failover.py::test_two_failovers_under_load_lose_nothing_and_answer_no_500",
            "tests/runs/test_submit.py::test_twenty_concurrent_posts_with_one_key_make_one_run",
        ),
    ),
    Mutation(
        "M3",
        "the archiver marks a chat archived before its object is written and verified",
        "src/parley/archive/archiver.py",
        _WRITE_THEN_MARK,
        _MARK_THEN_WRITE,
        (
            "tests/archive/test_cli.py::test_a_pass_killed_at_any_moment_loses_nothing",
            "tests/archive/test_cli.py::test_a_pass_that_dies_at_each_step_of_a_move_loses_nothing",
        ),
    ),
    Mutation(
        "M4",
        "the worker appends without its fence",
        "src/parley/runs/worker.py",
        "                await self._bus.append(progress.run_id, event, fence=progress.fence)",
        "                await self._bus.append(progress.run_id, event)",
        (
            "tests/runs/test_fence.py",
            "tests/faults/test_kills.py::"
            "test_a_worker_that_wakes_after_its_run_was_requeued_cannot_write_to_its_stream",
        ),
    ),
    # -- budgets, resume, admission
    Mutation(
        "M5",
        "a run's completion tokens are not charged",
        "src/parley/qos/budget.py",
        "        used = (run.prompt_tokens or 0) + (run.completion_tokens or 0)",
        "        used = run.prompt_tokens or 0",
        (
            "tests/qos/test_settlement.py::"
            "test_a_run_the_sweeper_fails_is_charged_prompt_and_completion",
        ),
    ),
    Mutation(
        "M6",
        "a resume ignores its Last-Event-ID (replays from the start)",
        "src/parley/runs/relay.py",
        "        after = resume_after(last_event_id)",
        "        after = resume_after(last_event_id) and None",
        ("tests/runs/test_relay.py::test_resume_after_random_cuts_is_exact",),
    ),
    Mutation(
        "M7",
        "the top tier's reserved slot is given to any run",
        "src/parley/runs/worker.py",
        "        return free <= self._settings.reserved_slots",
        "        return free < self._settings.reserved_slots",
        ("tests/qos/test_admission.py::test_the_top_tier_finds_its_reserved_slot_free",),
    ),
    # -- issue 39's properties
    Mutation(
        "M10",
        "a parse goes on after its client left",
        "src/parley/api/routes/attachments.py",
        "made = await while_connected(request, files.upload(who.user_id, chat_id, filename, data))",
        "made = await files.upload(who.user_id, chat_id, filename, data)",
        ("tests/api/test_hostile_files.py::test_a_parse_is_killed_when_its_client_goes_away",),
    ),
    Mutation(
        "M11",
        "an upload's body is read before its caller is authenticated",
        "src/parley/api/limits.py",
        "        if streamed:\n            await self.app(scope, _counted(receive, limit), send)\n"
        "            return\n",
        "",
        ("tests/api/test_hostile_files.py::test_an_anonymous_body_is_answered_from_its_headers",),
    ),
    Mutation(
        "M12",
        "a re-import is not deduplicated",
        "src/parley/store/imports.py",
        "    held = await _held(s, user_id, batch, keys)",
        "    held: dict[str, str] = {}",
        (
            "tests/api/test_hostile_files.py::test_one_s_own_export_imported_again_adds_nothing",
            "tests/store/test_imports.py::test_the_same_import_twice_adds_nothing_the_second_time",
        ),
    ),
    Mutation(
        "M13",
        "a background task that dies is not restarted",
        "src/parley/supervision.py",
        "            if not self._died(watched, error):\n                return",
        "            self._died(watched, error)\n            return",
        ("tests/test_supervision.py::test_a_task_that_dies_is_logged_and_restarted",),
    ),
    Mutation(
        "M14",
        "the worker does not notice its lease renewer died",
        "src/parley/runs/worker.py",
        "            done, _ = await asyncio.wait({renewer, taking}, "
        "return_when=asyncio.FIRST_COMPLETED)",
        "            done, _ = await asyncio.wait({taking}, return_when=asyncio.FIRST_COMPLETED)",
        (
            "tests/test_supervision.py::"
            "test_a_worker_whose_lease_renewer_dies_is_restarted_and_serves",
        ),
    ),
    Mutation(
        "M15",
        "answers are scanned without the confusables skeleton",
        "src/parley/safety/rules.py",
        "            scans.append(scans[0].twin(skeleton=True))",
        "            pass  # no skeleton scan",
        (
            "tests/safety/test_normalized.py::test_an_answer_with_a_disguised_private_key_is_stopped",
            "tests/safety/test_normalized.py::test_a_look_alike_letter_after_plain_text_is_scanned_from_what_came_before",
        ),
    ),
    Mutation(
        "M16",
        "an engine failure ends the runs in it as aborted, not failed",
        "src/parley/engines/builtin/loop.py",
        "TokenEvent(seq, None, FinishReason.ABORT, failed) for seq in held",
        "TokenEvent(seq, None, FinishReason.ABORT) for seq in held",
        (
            "tests/faults/test_engine_failure.py::"
            "test_a_failing_engine_step_fails_the_runs_in_it_and_the_engine_comes_back",
        ),
    ),
    Mutation(
        "M17",
        "a request the engine cannot take fails every request in the engine",
        "src/parley/engines/builtin/loop.py",
        "                self._add(seq)",
        "                self.core.add(seq)",
        ("tests/engines/test_loop.py::test_a_sequence_the_core_cannot_take_fails_alone",),
    ),
    Mutation(
        "M18",
        "password hashing shares anyio's thread pool",
        "src/parley/accounts/passwords.py",
        "            return await asyncio.get_running_loop()"
        ".run_in_executor(self._pool, fn, *args)",
        "            import anyio.to_thread\n\n"
        "            return await anyio.to_thread.run_sync(fn, *args)",
        ("tests/accounts/test_passwords.py::test_hashing_has_threads_of_its_own",),
    ),
    Mutation(
        "M19",
        "a cut answer keeps its broken last character",
        "src/parley/engines/builtin/tokenizer.py",
        "        return self._emit(final=True).rstrip(REPLACEMENT_CHAR)",
        "        return self._emit(final=True)",
        (
            "tests/runs/test_builtin_engine.py::"
            "test_an_answer_cut_inside_a_character_never_ends_in_a_broken_one",
        ),
    ),
)


def run(mutation: Mutation, runs: int) -> tuple[int, int, float]:
    """(caught, runs, seconds): how many runs of the mutation's tests failed."""
    path = ROOT / mutation.path
    original = path.read_text()
    if original.count(mutation.old) != 1:
        raise SystemExit(f"{mutation.id}: the code to mutate is not (once) in {mutation.path}")
    started = time.monotonic()
    caught = 0
    try:
        path.write_text(original.replace(mutation.old, mutation.new, 1))
        for _ in range(runs):
            result = subprocess.run(  # noqa: S603 (this interpreter, the listed tests)
                [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
                 "-p", "no:randomly", *mutation.tests],
                cwd=ROOT,
                capture_output=True,
                text=True,
                env={**os.environ, "PYTEST_ADDOPTS": ""},
            )  # fmt: skip
            caught += result.returncode != 0
    finally:
        path.write_text(original)
    return caught, runs, time.monotonic() - started


def main() -> int:
    # a SIGTERM (a timeout, a kill) unwinds like Ctrl-C: the mutated file is put back
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("ids", nargs="*", help="mutations to run (default: all)")
    parser.add_argument("--runs", type=int, default=1, help="test runs per mutation")
    parser.add_argument("--list", action="store_true", help="list the mutations and stop")
    args = parser.parse_args()
    chosen = [m for m in MUTATIONS if not args.ids or m.id in args.ids]
    if args.list:
        for m in chosen:
            print(f"{m.id:4} {m.what}\n     {m.path}; {', '.join(m.tests)}")
        return 0
    missed = 0
    print(f"{'id':4} {'caught':>8} {'seconds':>8}  mutation")
    for m in chosen:
        caught, runs, seconds = run(m, args.runs)
        missed += caught < runs
        print(f"{m.id:4} {caught:>4}/{runs:<3} {seconds:>8.0f}  {m.what}", flush=True)
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
