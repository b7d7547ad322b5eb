"""Load and validate the configuration; errors name the field that is wrong."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from tidemark.config.model import TidemarkConfig
from tidemark.exceptions import ConfigError

ENV_PATH = "TIDEMARK_CONFIG"
ENV_JSON = "TIDEMARK_CONFIG_JSON"


def _field_path(loc: tuple[int | str, ...]) -> str:
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif part.startswith(("function-", "json-or-python")) or part in {"constrained-str"}:
            continue
        else:
            path += f".{part}" if path else str(part)
    return path


def parse_config(data: Any, *, origin: str = "<config>") -> TidemarkConfig:
    """Validate already-parsed data (a dict from YAML or JSON)."""
    if not isinstance(data, dict):
        raise ConfigError(f"{origin}: the configuration must be a mapping, got {type(data).__name__}")
    try:
        return TidemarkConfig.model_validate(data)
    except ValidationError as exc:
        problems = []
        for error in exc.errors():
            message = error["msg"].removeprefix("Value error, ")
            if error["type"] == "extra_forbidden":
                message = "unknown field"
            path = _field_path(error["loc"])
            # Checks across sections name their fields in the message itself.
            problems.append(f"{path}: {message}" if path else message)
        raise ConfigError(f"{origin}: " + "; ".join(problems)) from None


def load_config(path: str | os.PathLike[str]) -> TidemarkConfig:
    source = Path(path)
    try:
        text = source.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{source}: cannot read the configuration ({exc.strerror})") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: not valid YAML: {exc}") from None
    return parse_config(_inline_avro_schemas(data, source.parent), origin=str(source))


def _inline_avro_schemas(data: Any, base: Path) -> Any:
    """``format.value_schema.avro_schema: <file>`` (relative to the config file) becomes the schema
    itself (``avro``), so the Lambdas and the Spark job get it inside the one configuration."""
    streams = data.get("streams") if isinstance(data, dict) else None
    for index, stream in enumerate(streams if isinstance(streams, list) else []):
        fmt = stream.get("format") if isinstance(stream, dict) else None
        schema = fmt.get("value_schema") if isinstance(fmt, dict) else None
        if not isinstance(schema, dict) or "avro_schema" not in schema:
            continue
        path = base / str(schema.pop("avro_schema"))
        where = f"streams[{index}].format.value_schema.avro_schema"
        try:
            schema["avro"] = json.loads(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise ConfigError(f"{where}: cannot read {path} ({exc.strerror})") from None
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{where}: {path} is not JSON: {exc}") from None
    return data


def load_config_from_env(environ: os._Environ[str] | dict[str, str] | None = None) -> TidemarkConfig:
    """Lambda cold start: ``TIDEMARK_CONFIG_JSON`` (inline) wins over ``TIDEMARK_CONFIG`` (a path)."""
    env = os.environ if environ is None else environ
    inline = env.get(ENV_JSON)
    if inline:
        try:
            data = json.loads(inline)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"${ENV_JSON}: not valid JSON: {exc}") from None
        return parse_config(data, origin=f"${ENV_JSON}")
    path = env.get(ENV_PATH)
    if not path:
        raise ConfigError(f"set ${ENV_PATH} (a path) or ${ENV_JSON} (inline JSON) to the Tidemark configuration")
    return load_config(path)
