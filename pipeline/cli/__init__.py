"""Command plumbing that `pipeline` and `train` share: the `tokshards` command, config files, interrupts, log cadence."""
