"""``--kafka-config`` files read as ``java.util.Properties.load`` reads them, and errors that
never echo a line (it may hold a secret)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidemark.cli.kafka_properties import logical_lines, read_properties, split_property
from tidemark.exceptions import ConfigError
from tidemark.kafka_log import redacted


def read(tmp_path: Path, text: str, *, mode: int = 0o600) -> tuple[dict[str, str], list[str]]:
    path = tmp_path / "client.properties"
    path.write_text(text, encoding="utf-8")
    path.chmod(mode)
    warnings: list[str] = []
    return read_properties(path, warn=warnings.append), warnings


def test_every_separator_a_java_properties_file_allows(tmp_path):
    settings, warnings = read(
        tmp_path,
        "# a comment\n! another\n\n"
        "security.protocol=SASL_SSL\n"
        "sasl.mechanism : SCRAM-SHA-512\n"
        "client.id tidemark-ops\n"
        "  socket.timeout.ms\t=\t20000  \n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\\n"
        '    username="ops" password="s3cr=t:x";\n'
        "empty.value=\n"
        "escaped\\=key=a\\tb\\u00e9\n",
    )
    assert settings == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "client.id": "tidemark-ops",
        "socket.timeout.ms": "20000  ",  # Java keeps trailing whitespace in a value
        "sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required username="ops" '
        'password="s3cr=t:x";',
        "empty.value": "",
        "escaped=key": "a\tbé",
    }
    assert warnings == []


def test_a_key_without_a_value_names_the_line_and_key_never_the_line(tmp_path):
    with pytest.raises(ConfigError) as error:
        read(tmp_path, "client.id=x\nsasl.mechanism\n")
    assert str(error.value).endswith("client.properties:2: property 'sasl.mechanism' has no value (expected key=value)")
    with pytest.raises(ConfigError) as pasted:
        read(tmp_path, "client.id=x\n\n# the password, pasted alone:\nhunter2/with'quote\n")
    assert "hunter2" not in str(pasted.value) and str(pasted.value).endswith(
        ":4: property has no value (expected key=value)"
    )


def test_a_file_others_can_read_is_warned_about(tmp_path):
    _settings, warnings = read(tmp_path, "client.id=x\n", mode=0o644)
    assert len(warnings) == 1 and "can be read by other users (mode 0644)" in warnings[0] and "chmod 600" in warnings[0]
    assert read(tmp_path, "client.id=x\n", mode=0o600)[1] == []


def test_a_refused_value_of_a_secret_setting_is_redacted():
    reason = 'Invalid value "hunter2" for configuration property "sasl.password"'
    settings = {"sasl.password": "hunter2", "security.protocol": "bogus", "bootstrap.servers": "b:9092"}
    assert redacted(reason, settings) == 'Invalid value "<redacted>" for configuration property "sasl.password"'
    plain = 'Invalid value "bogus" for "security.protocol"'
    assert redacted(plain, settings) == plain  # not a secret setting: left as librdkafka said it


KEYS = st.text(st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), min_size=1, max_size=12)
VALUES = st.text(st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), max_size=20)


def escape(text: str, *, key: bool) -> str:
    """How a Java ``Properties.store`` writes ``text`` (a key escapes its separators and spaces,
    a value its leading space; both escape backslashes, comment marks and line breaks)."""
    out = []
    for index, char in enumerate(text):
        if char == "\\":
            out.append("\\\\")
        elif char in "=:#!" or (char == " " and (key or index == 0)):
            out.append("\\" + char)
        elif char in "\t\n\r\f":
            out.append({"\t": "\\t", "\n": "\\n", "\r": "\\r", "\f": "\\f"}[char])
        else:
            out.append(char)
    return "".join(out)


@given(st.dictionaries(KEYS, VALUES, max_size=6), st.lists(st.sampled_from(["=", ":", " ", " = ", "\t: "]), min_size=6))
def test_what_java_would_write_is_read_back_whole(settings, separators):
    """Generated keys and values written as ``Properties.store`` escapes them, each with one of
    the separators Java allows, and some values split over continued lines, read back equal."""
    lines = []
    for (key, value), separator in zip(settings.items(), separators, strict=False):
        written = escape(value, key=False)
        # a continued line (Java drops a continuation's leading whitespace: never split before one)
        if len(written) > 4 and written[3] != "\\" and written[4] not in " \t\f":
            written = written[:4] + "\\\n    " + written[4:]
        lines.append(escape(key, key=True) + separator + written)
    parsed = {}
    for _number, line in logical_lines("\n".join(lines)):
        key, followed, value = split_property(line)
        assert followed or value == ""
        parsed[key] = value
    assert parsed == settings
