#!/usr/bin/env python3
"""Write a Markdown reference of a JSON Schema (nslab's topology or study format).

The reference pages of the documentation site are generated, never written by
hand, so they cannot drift from the code:

    .venv/bin/python scripts/schema_reference.py --write

writes ``docs/topology.schema.json`` (what ``nslab topo schema`` prints),
``docs/topology-reference.md`` and ``docs/study-file-reference.md`` (from
``docs/study.schema.json``, what ``nslab study schema`` prints). One schema:

    python3 scripts/schema_reference.py SCHEMA.json TITLE > PAGE.md

``tests/unit/test_docs.py`` regenerates them and compares them with the files.
"""
from __future__ import annotations

import json
import os
import re
import sys
from typing import Any, Dict, List, Optional, Tuple
from nslab.model.topo import schema

Schema = Dict[str, Any]

_ATTR = re.compile(r"^\s{4}([A-Za-z_][A-Za-z0-9_]*):\s*(.*)$")


def _split_doc(doc: str) -> Tuple[str, Dict[str, str]]:
    """Split a Google-style docstring into its text and its ``Attributes:`` entries."""
    text: List[str] = []
    attrs: Dict[str, str] = {}
    current: Optional[str] = None
    in_attrs = False
    for line in doc.splitlines():
        if line.strip() == "Attributes:":
            in_attrs = True
            continue
        if not in_attrs:
            text.append(line)
            continue
        m = _ATTR.match(line)
        if m:
            current = m.group(1)
            attrs[current] = m.group(2).strip()
        elif current and line.startswith("        "):
            attrs[current] += " " + line.strip()
        elif line.strip():
            in_attrs, current = False, None
            text.append(line)
    return "\n".join(text).strip(), attrs


def _rst_to_md(text: str) -> str:
    """Docstrings use reST literals (````x````); Markdown wants ```x```."""
    text = re.sub(r"``([^`]+)``", r"`\1`", text)
    return re.sub(r":(?:mod|func|class|meth):`([^`]+)`", r"`\1`", text)


def _cell(text: str) -> str:
    return _rst_to_md(" ".join(text.split())).replace("|", "\\|")


def _anchor(name: str) -> str:
    return name.lower()


def _type(s: Schema) -> str:
    """One schema as a short type expression, with links to definitions."""
    if "$ref" in s:
        name = s["$ref"].rsplit("/", 1)[-1]
        return f"[{name}](#{_anchor(name)})"
    if "const" in s:
        return f"`{json.dumps(s['const'])}`"
    if "enum" in s:
        return " or ".join(f"`{json.dumps(v)}`" for v in s["enum"])
    for key in ("anyOf", "oneOf"):
        if key in s:
            parts = []
            for sub in s[key]:
                t = _type(sub)
                if t not in parts:
                    parts.append(t)
            return " or ".join(parts)
    if "allOf" in s and len(s["allOf"]) == 1:
        return _type(s["allOf"][0])
    t = s.get("type")
    if t == "array":
        inner = _type(s["items"]) if "items" in s else "any"
        n = ""
        if "minItems" in s and s.get("minItems") == s.get("maxItems"):
            n = f" of {s['minItems']}"
        return f"list{n} of {inner}"
    if t == "object":
        if "patternProperties" in s:
            ((pat, sub),) = list(s["patternProperties"].items())[:1]
            return f"map of name (`{pat}`) to {_type(sub)}"
        add = s.get("additionalProperties")
        if isinstance(add, dict):
            return f"map of name to {_type(add)}"
        return "mapping"
    if t == "null":
        return "null"
    out = t or "any"
    limits = []
    for k, sym in (("minimum", ">="), ("ge", ">="), ("exclusiveMinimum", ">"),
                   ("maximum", "<="), ("le", "<="), ("exclusiveMaximum", "<"),
                   ("minLength", "length >="), ("maxLength", "length <=")):
        if k in s:
            limits.append(f"{sym} {s[k]}")
    if "format" in s:
        limits.append(s["format"])
    if "pattern" in s:
        limits.append(f"`{s['pattern']}`")
    if limits:
        out += " (" + ", ".join(limits) + ")"
    return out


def _description(s: Schema) -> str:
    if s.get("description"):
        return s["description"]
    for key in ("anyOf", "oneOf"):
        for sub in s.get(key, []):
            if sub.get("description"):
                return sub["description"]
    return ""


def _object(name: str, s: Schema, level: str) -> List[str]:
    text, attrs = _split_doc(s.get("description", ""))
    for attr, desc in list(attrs.items()):   # "the YAML key is ``switch``": an alias
        m = re.search(r"YAML\s+key\s+is\s+``(\w+)``", desc)
        if m:
            attrs.setdefault(m.group(1), desc)
    out = [f"{level} {name}", ""]
    if text:
        out += [_rst_to_md(text), ""]
    props = s.get("properties", {})
    if not props:
        return out
    required = set(s.get("required", []))
    out += ["| key | type | default | meaning |", "|---|---|---|---|"]
    for key, sub in props.items():
        default = "required" if key in required else (
            f"`{json.dumps(sub['default'])}`" if "default" in sub else "")
        desc = _description(sub) or attrs.get(key, "")
        out.append(f"| `{key}` | {_cell(_type(sub))} | {default} | {_cell(desc)} |")
    if s.get("additionalProperties") is False:
        out += ["", "Any other key is refused."]
    out.append("")
    return out


def reference(schema: Schema, title: str) -> str:
    """The Markdown reference page of ``schema``."""
    out = [f"# {title}", "",
           "<!-- Generated by scripts/schema_reference.py from the JSON Schema; "
           "do not edit by hand. -->", ""]
    out += _object("The file", {k: v for k, v in schema.items() if k != "$defs"}, "##")[2:]
    for name in sorted(schema.get("$defs", {})):
        out += _object(name, schema["$defs"][name], "##")
    return "\n".join(out).rstrip() + "\n"


#: (schema file in docs/, page in docs/, the page's title)
PAGES = [("topology.schema.json", "topology-reference.md", "YAML topology reference"),
         ("study.schema.json", "study-file-reference.md", "Study file reference")]


def topology_schema_text() -> str:
    """What ``nslab topo schema`` prints (and docs/topology.schema.json holds)."""
    return json.dumps(schema(), indent=2) + "\n"


def expected(docs: str) -> Dict[str, str]:
    """Every generated file of ``docs`` (by name) and the text it should hold."""
    out = {"topology.schema.json": topology_schema_text()}
    for schema_file, page, title in PAGES:
        if schema_file in out:
            schema = json.loads(out[schema_file])
        else:
            with open(os.path.join(docs, schema_file), encoding="utf-8") as f:
                schema = json.load(f)
        out[page] = reference(schema, title)
    return out


def main(argv: List[str]) -> int:
    if argv[1:] == ["--write"]:
        docs = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs")
        for name, text in expected(docs).items():
            with open(os.path.join(docs, name), "w", encoding="utf-8") as f:
                f.write(text)
            print(f"wrote docs/{name}")
        return 0
    if len(argv) != 3:
        print("usage: schema_reference.py SCHEMA.json TITLE | --write", file=sys.stderr)
        return 2
    with open(argv[1], encoding="utf-8") as f:
        schema = json.load(f)
    sys.stdout.write(reference(schema, argv[2]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
