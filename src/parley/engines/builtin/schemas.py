"""JSON schemas as the grammar takes them: a response format's, a function's arguments;
compact (no whitespace for a model to pad with) and with integers kept within JSON's
portable range."""

from __future__ import annotations

from typing import Any

from parley.engines.tools import ResponseFormat, ToolSpec


def schema_of(response_format: ResponseFormat) -> dict[str, Any]:
    """The JSON schema a structured answer follows, as the grammar takes it."""
    schema: dict[str, Any] = {"type": "object"}
    if response_format.json_schema is not None and response_format.json_schema.schema_:
        schema = dict(response_format.json_schema.schema_)
    # compact JSON: a model cannot pad its answer with whitespace until it runs out of tokens
    schema = bounded(schema)
    schema["x-guidance"] = {"whitespace_flexible": False}
    return schema


SAFE_INTEGER = 2**53 - 1  # JSON's portable integers (RFC 8259 section 6)


def bounded(schema: Any) -> Any:
    """The schema with every integer it leaves unbounded kept within JSON's portable range,
    so that a model cannot write digits until its tokens run out."""
    if isinstance(schema, list):
        return [bounded(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: bounded(value) for key, value in schema.items()}
    kinds = out.get("type")
    if kinds == "integer" or (isinstance(kinds, list) and "integer" in kinds):
        out.setdefault("maximum", SAFE_INTEGER)
        out.setdefault("minimum", -SAFE_INTEGER)
    return out


def arguments_schema(spec: ToolSpec) -> dict[str, Any]:
    """The schema a call's arguments follow (any object when the function gives none)."""
    schema: dict[str, Any] = bounded(dict(spec.function.parameters or {"type": "object"}))
    schema["x-guidance"] = {"whitespace_flexible": False}
    return schema
