"""Command plumbing that `pipeline` and `train` share: the `tokshards` command, options from
declared settings, config files, interrupts, log cadence."""
