"""``--kafka-config``: a Kafka client's ``.properties`` file, read as Java reads one.

``java.util.Properties.load`` is what Kafka's own tools use, and what a user's file was written
for: ``key=value``, ``key: value`` or ``key value``; ``#`` and ``!`` comment lines; a line
ending in an odd number of backslashes continues on the next; ``\\t``, ``\\n``, ``\\uXXXX`` and
``\\<char>`` escapes. Such files hold credentials (``sasl.jaas.config``, ``ssl.key.password``):
an error names the file, the line number and, when it has a property name's shape (lowercase
words joined by dots), the key -- never the line, which may be a secret pasted on its own.
"""

from __future__ import annotations

import re
import stat
from collections.abc import Callable
from pathlib import Path

from tidemark.exceptions import ConfigError

#: a property name as Kafka clients spell them (lowercase words joined by dots: ``sasl.mechanism``);
#: a key of another shape is not shown in an error (``hunter2-pw`` alone on a line is a secret)
PROPERTY_NAME = r"[a-z][a-z0-9_-]*(\.[a-z][a-z0-9_-]*)+"
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
_BLANK = " \t\f"


def logical_lines(text: str) -> list[tuple[int, str]]:
    """The file's logical lines, each with its first line's number: comments and blank lines
    skipped, continued lines joined (a continuation's leading whitespace dropped)."""
    found: list[tuple[int, str]] = []
    pending: tuple[int, str] | None = None
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.lstrip(_BLANK)
        if pending is None and (not line or line[0] in "#!"):
            continue
        backslashes = len(line) - len(line.rstrip("\\"))
        continued = backslashes % 2 == 1
        body = line[:-1] if continued else line
        pending = (pending[0], pending[1] + body) if pending else (number, body)
        if not continued:
            found.append(pending)
            pending = None
    if pending is not None:
        found.append(pending)
    return found


def unescape(text: str) -> str:
    out: list[str] = []
    index = 0
    while index < len(text):
        char = text[index]
        if char == "\\" and index + 1 < len(text):
            following = text[index + 1]
            code = text[index + 2 : index + 6]
            if following == "u" and re.fullmatch(r"[0-9A-Fa-f]{4}", code):
                out.append(chr(int(code, 16)))
                index += 6
                continue
            out.append(_ESCAPES.get(following, following))
            index += 2
            continue
        out.append(char)
        index += 1
    return "".join(out)


def split_property(line: str) -> tuple[str, bool, str]:
    """A logical line's key, whether anything followed it (a separator or a value), and its
    value: the key ends at the first unescaped ``=``, ``:`` or whitespace; whitespace, then one
    ``=`` or ``:``, then whitespace separate it from the value."""
    index = 0
    while index < len(line) and line[index] not in "=:" + _BLANK:
        index += 2 if line[index] == "\\" else 1
    key = line[:index]
    rest = line[index:].lstrip(_BLANK)
    separated = bool(rest) and rest[0] in "=:"
    if separated:
        rest = rest[1:].lstrip(_BLANK)
    return unescape(key), separated or bool(rest), unescape(rest)


def read_properties(path: Path, *, warn: Callable[[str], None]) -> dict[str, str]:
    """The settings in ``path``. A line with a key and nothing after it is a ``ConfigError``
    (``<path>:<line>: property 'sasl.mechanism' has no value``); ``warn`` is told when other
    users may read the file."""
    option = "--kafka-config"
    try:
        text = path.read_text(encoding="utf-8")
        mode = path.stat().st_mode
    except OSError as exc:
        raise ConfigError(f"{option} {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{option} {path}: not UTF-8 text") from None
    if mode & (stat.S_IRGRP | stat.S_IROTH):
        warn(
            f"warning: {option} {path} can be read by other users (mode {stat.S_IMODE(mode):04o}); "
            "it may hold credentials: chmod 600 it"
        )
    settings: dict[str, str] = {}
    for number, line in logical_lines(text):
        key, followed, value = split_property(line)
        if not key or not followed:
            named = f" {key!r}" if re.fullmatch(PROPERTY_NAME, key) else ""
            raise ConfigError(f"{option} {path}:{number}: property{named} has no value (expected key=value)")
        settings[key] = value
    return settings
