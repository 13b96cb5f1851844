"""What the tests start and build: stand-ins, the GCS emulator, the worker environment, faults,
corpora and prepared directories. Benchmarks import the same corpora."""
