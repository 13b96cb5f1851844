"""`python -m pipeline {prepare,verify,inspect,batches,corpus}`.

Expected failures print one line and exit non-zero; tracebacks are kept for real bugs.
"""

from __future__ import annotations

import logging
import os
import sys

from pipeline import interrupts

USAGE = "usage: python -m pipeline {prepare,verify,inspect,batches,corpus} [options]"


def _import_beam_quietly() -> None:
    """Without Beam's gcp extra, importing Beam warns on the root logger that BigQuery's clients are
    missing; no command here uses them, so the warning is held back for the import alone."""
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)
    try:
        import apache_beam  # noqa: F401
    finally:
        root.setLevel(level)


def main(argv: list[str] | None = None) -> int:
    interrupts.install()
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    try:
        status = _run(command, rest)
        interrupts.settle()
    except KeyboardInterrupt:
        interrupts.settle()
        return _interrupted(command)
    # An interrupt that a finalizer swallowed still ends the run as interrupted.
    return _interrupted(command) if interrupts.received() else status


def _interrupted(command: str) -> int:
    start = "\n" if sys.stderr.isatty() else ""  # after the progress line
    if command == "prepare":
        # The job and its workers are stopped on the way out; what they finished stays.
        print(f"{start}prepare: interrupted; the units done are kept, and a rerun resumes", file=sys.stderr)
    else:
        print(f"{start}{command}: interrupted", file=sys.stderr)
    return 130


def _run(command: str, rest: list[str]) -> int:
    if command in ("prepare", "verify", "inspect"):
        _import_beam_quietly()
    if command == "prepare":
        from pipeline.prepare.launcher import PrepareError, run

        # Beam's local job service relays every worker's log lines; keep the progress readable.
        logging.getLogger("apache_beam.runners.portability").setLevel(logging.ERROR)

        try:
            run(rest)
        except PrepareError as e:
            if e.details:
                print(e.details, file=sys.stderr)
            print(f"prepare: error: {e}", file=sys.stderr)
            return 1
        return 0
    if command == "verify":
        from pipeline.verify import main as verify_main

        return verify_main(rest)
    if command == "inspect":
        from pipeline.inspect_dataset import main as inspect_main

        return inspect_main(rest)
    if command == "batches":
        from pipeline.load.batches import main as batches_main

        return batches_main(rest)
    if command == "corpus":
        from pipeline.corpus import main as corpus_main

        return corpus_main(rest)
    print(f"unknown command {command!r}\n{USAGE}", file=sys.stderr)
    return 2


def _exit(status: int) -> None:
    """Ends the process without the interpreter's teardown of Beam's and its clients' modules (half a
    second that does nothing here: every file is written and closed before `main` returns)."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


if __name__ == "__main__":
    _exit(main())
