"""Loaded by every Python process of a test run that puts this directory on PYTHONPATH (the launcher
and Beam's worker processes alike, spawned or forked): the faults that the run's environment asks
for, in all of them."""

import os

if "FLAKY_STATE_DIR" in os.environ:
    import flaky_filesystem  # noqa: F401  (the `flaky://` scheme)
if "INTERRUPT_AT" in os.environ:
    import interrupt

    interrupt.install()
if "UNITS_PASS" in os.environ:
    import unit_starts

    unit_starts.install()
if "FAIL_UNIT" in os.environ:
    import unit_failure

    unit_failure.install()
if "PRISM_STATE_DIR" in os.environ:
    import prism

    prism.install()
