"""Data contracts shared by `prepare` and the loader: names, versions, record layout, manifest."""
