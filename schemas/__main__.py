"""`python -m schemas`: write the exported JSON Schema of the manifest beside this package."""

from __future__ import annotations

import json
import os

from schemas.manifest_schema import JSON_SCHEMA

SCHEMA_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "manifest.schema.json")


def exported_text() -> str:
    return json.dumps(JSON_SCHEMA, indent=2, sort_keys=True) + "\n"


if __name__ == "__main__":
    with open(SCHEMA_FILE, "w") as f:
        f.write(exported_text())
    print(f"wrote {SCHEMA_FILE}")
