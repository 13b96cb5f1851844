"""`python -m train ...` trains; `python -m train sample ...` samples from a run (train/cli.py).

Python looks `train` up in the working directory first: where a `train.py` of the user's lies, that
file runs instead, before any code of this project. `tokshards train` (a console script, which
does not search the working directory) or `python -P -m train` run this trainer from anywhere.
"""

import os
import sys

if __name__ == "__main__":
    # `python -m` puts the working directory first on sys.path, where a user's own `model.py` or
    # `pipeline.py` would stand in for this project's packages: they are looked up where it is
    # installed.
    if sys.path and sys.path[0] == os.getcwd() != os.path.dirname(
        os.path.dirname(os.path.abspath(__file__))
    ):
        del sys.path[0]
    # First: a Ctrl-C from here on is one line and status 130, held back while modules load
    # (commands.py).
    from pipeline.cli import interrupts

    interrupts.install(deferred=True)
    from pipeline.cli import commands as cli

    if sys.argv[1:2] == ["sample"]:
        cli.exit_now(cli.run_command("sample", sys.argv[2:], "python -m train sample"))
    cli.exit_now(cli.run_command("train", sys.argv[1:], "python -m train"))
