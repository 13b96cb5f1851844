"""The trainer: wires the loader, the model, Optax and Orbax together."""
