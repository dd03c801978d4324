"""The optional TOML settings file (``--config`` or ``PARLEY_CONFIG_FILE``)."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource

from parley.errors import ConfigurationError


class TomlFileSource(PydanticBaseSettingsSource):
    """Reads the TOML file named by ``config_file`` (argument or environment)."""

    def __init__(self, settings_cls: type[BaseSettings], path: Path | None) -> None:
        super().__init__(settings_cls)
        self._values: dict[str, Any] = {}
        if path is not None:
            try:
                with path.open("rb") as f:
                    self._values = tomllib.load(f)
            except FileNotFoundError as e:
                raise ConfigurationError(f"config file not found: {path}") from e
            except tomllib.TOMLDecodeError as e:
                raise ConfigurationError(f"config file {path} is not valid TOML: {e}") from e

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return self._values.get(field_name), field_name, False

    def __call__(self) -> dict[str, Any]:
        return dict(self._values)
