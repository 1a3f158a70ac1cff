"""Write schema.json from the dataclasses in models.py; --check only compares."""

import ast
import hashlib
import json
import sys
from pathlib import Path

TYPES = {"str": "string", "int": "integer", "float": "number", "bool": "boolean"}


def schema(source: bytes) -> str:
    tree = ast.parse(source)
    [item] = [node for node in tree.body if isinstance(node, ast.ClassDef)]
    properties, required = {}, []
    for field in item.body:
        if not isinstance(field, ast.AnnAssign):
            continue
        name, kind = field.target.id, TYPES[ast.unparse(field.annotation)]
        properties[name] = {"type": kind}
        if field.value is None:
            required.append(name)
        else:
            properties[name]["default"] = ast.literal_eval(field.value)
    document = {
        "$comment": "generated from models.py by the regen-schema skill: do not edit",
        "title": item.name,
        "type": "object",
        "properties": properties,
        "required": required,
        "x-source-sha256": hashlib.sha256(source).hexdigest(),
    }
    return json.dumps(document, indent=2) + "\n"


def main() -> int:
    fresh = schema(Path("models.py").read_bytes())
    target = Path("schema.json")
    if "--check" in sys.argv:
        if target.exists() and target.read_text("utf-8") == fresh:
            print("schema.json is up to date")
            return 0
        print("schema.json is out of date: run this script without --check")
        return 1
    target.write_text(fresh, "utf-8")
    print("wrote schema.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
