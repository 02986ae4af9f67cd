"""The HTTP interface of `gmlm serve` as Markdown, from the app's own OpenAPI document: the
endpoints, then each request and response model's fields and JSON schema. The app is built
with no models (nothing is loaded; the schema does not depend on them).

    OMP_NUM_THREADS=1 .venv/bin/python tools/openapi_doc.py                     # print it
    OMP_NUM_THREADS=1 .venv/bin/python tools/openapi_doc.py --write docs/serving.md

--write replaces the text between BEGIN and END in that file (tests/test_docs.py checks that
docs/serving.md holds what this prints)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

BEGIN = "<!-- tools/openapi_doc.py: begin (generated; do not edit by hand) -->"
END = "<!-- tools/openapi_doc.py: end -->"


def openapi() -> dict[str, Any]:
    """The OpenAPI document of `gmlm serve`'s app, built with no backends."""
    from gmlm.serve.app import create_app
    from gmlm.serve.settings import ServeSettings

    return create_app(dict, ServeSettings()).openapi()


def type_of(schema: dict[str, Any]) -> str:
    """A field's type in a few words: `string`, `array of string`, `number or null`, a model."""
    if "$ref" in schema:
        return schema["$ref"].rsplit("/", 1)[-1]
    if "anyOf" in schema:
        return " or ".join(type_of(s) for s in schema["anyOf"])
    kind = schema.get("type", "any")
    if "enum" in schema:
        return f"{kind}: one of " + ", ".join(f"`{v}`" for v in schema["enum"])
    if kind == "array":
        return f"array of {type_of(schema.get('items', {}))}"
    if kind == "object" and "additionalProperties" in schema:
        values = schema["additionalProperties"]
        return "object" if values is True else f"object of {type_of(values)}"
    return str(kind)


def cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def model_section(name: str, schema: dict[str, Any]) -> list[str]:
    required = set(schema.get("required", []))
    lines = [f"### {name}", ""]
    if schema.get("description"):
        lines += [" ".join(schema["description"].split()), ""]
    lines += ["| field | type | required | default | description |", "|---|---|---|---|---|"]
    for field, spec in schema.get("properties", {}).items():
        default = json.dumps(spec["default"]) if "default" in spec else ""
        lines.append(
            f"| `{field}` | {cell(type_of(spec))} | {'yes' if field in required else 'no'} "
            f"| {cell(default)} | {cell(spec.get('description', ''))} |"
        )
    if schema.get("additionalProperties") is False:
        lines += ["", "Any other field is refused (422)."]
    body = json.dumps(schema, indent=2, ensure_ascii=False)
    return [*lines, "", "```json", body, "```", ""]


def markdown(document: dict[str, Any]) -> str:
    """The endpoints table, then every model of the document's components."""
    lines = ["| method | path | answers |", "|---|---|---|"]
    for path, methods in document["paths"].items():
        for method, operation in methods.items():
            answers = ", ".join(
                f"{code} {' '.join(response['description'].split())}"
                for code, response in operation.get("responses", {}).items()
            )
            lines.append(f"| {method.upper()} | `{path}` | {cell(answers)} |")
    lines.append("")
    for name, schema in document.get("components", {}).get("schemas", {}).items():
        lines += model_section(name, schema)
    return "\n".join(lines).rstrip("\n") + "\n"


def section(document: dict[str, Any]) -> str:
    """markdown(document) between the BEGIN and END lines."""
    return f"{BEGIN}\n\n{markdown(document)}\n{END}"


def replace_section(text: str, generated: str) -> str:
    """`text` with its BEGIN ... END section replaced by `generated`."""
    start, end = text.index(BEGIN), text.index(END) + len(END)
    return text[:start] + generated + text[end:]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", type=Path, help="replace the generated section of this file")
    args = parser.parse_args(argv)
    generated = section(openapi())
    if args.write is None:
        sys.stdout.write(generated + "\n")
        return 0
    text = args.write.read_text(encoding="utf-8")
    args.write.write_text(replace_section(text, generated), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
