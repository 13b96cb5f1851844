"""Data contracts shared by `prepare` and the loader: names, versions, record layout, prepare's
config and the manifest; and what both sides' commands share: settings declared once, user
errors."""
