"""A prepared directory as a reader sees it: storage, the manifest, integrity, verify and
inspect."""
