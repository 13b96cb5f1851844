"""Loaded by every Python process of a test run that puts this directory on PYTHONPATH (the launcher
and Beam's worker processes alike), so that they all know the `flaky://` scheme."""

import flaky_filesystem  # noqa: F401
