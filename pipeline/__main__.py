"""`python -m pipeline COMMAND ...`: the `tokshards` command (pipeline/cli/commands.py) run as a
module."""

import os
import sys

if __name__ == "__main__":
    # `python -m` puts the working directory first on sys.path, where a user's own `model.py` or
    # `schemas.py` would stand in for this project's packages: they are looked up where it is
    # installed.
    if sys.path and sys.path[0] == os.getcwd() != os.path.dirname(
        os.path.dirname(os.path.abspath(__file__))
    ):
        del sys.path[0]
    from pipeline.cli import commands as cli

    cli.exit_now(cli.main(prog="python -m pipeline"))
