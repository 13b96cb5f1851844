"""prepare's write step: shards, the output directory's state, and the manifest assembled at the
end."""
