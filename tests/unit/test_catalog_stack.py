"""The Glue catalog of the archive: one database, one table per stream, Athena partition projection.

Pure synthesis of ``stacks.catalog.ArchiveCatalog`` in a bare ``Stack`` (and once in the whole
stack): the SerDe and formats each format needs, the columns the writers write, and every
projection property, ``storage.location.template`` spelling the folders ``object_key`` makes.
"""

from __future__ import annotations

import io
import json
from typing import Any

import orjson
import pytest
from aws_cdk import Stack
from aws_cdk.assertions import Annotations, Capture, Match, Template

from stacks.catalog import ArchiveCatalog
from tests.support.cdk import synth_stack, with_changes
from tidemark.catalog import avro_schema, describe_table
from tidemark.clock import ManualClock
from tidemark.config import TidemarkConfig
from tidemark.config.model import ArchiveSettings, StreamConfig
from tidemark.exceptions import ConfigError
from tidemark.formats import RenderSpec, format_for
from tidemark.staging.frames import RAW, Frame
from tidemark.writer.stream import StreamContext

BUCKET = "archive-bucket"
TABLE = "AWS::Glue::Table"
PARQUET_INPUT = "org.apache.hadoop.hive.ql.io.parquet.MapredParquetInputFormat"
PARQUET_OUTPUT = "org.apache.hadoop.hive.ql.io.parquet.MapredParquetOutputFormat"
TEXT_INPUT = "org.apache.hadoop.mapred.TextInputFormat"
TEXT_OUTPUT = "org.apache.hadoop.hive.ql.io.HiveIgnoreKeyTextOutputFormat"
ORDER_FIELDS = [
    {"name": "order_id", "type": "string"},
    {"name": "price", "type": "double"},
    {"name": "quantity", "type": "long"},
    {"name": "gift", "type": "boolean", "nullable": True},
]
ORDER_STRUCT = "struct<order_id:string,price:double,quantity:bigint,gift:boolean>"


def stream(name: str, **sections: Any) -> StreamConfig:
    return StreamConfig.model_validate(
        {"name": name, "source": {"kind": "kafka", "topic": f"t.{name}", "bootstrap_servers": ["b:9092"]}, **sections}
    )


STREAMS = [
    # parquet, values-style partition folders, plain hours
    stream(
        "orders",
        format={"type": "parquet", "value_schema": {"fields": [*ORDER_FIELDS, {"name": "country", "type": "string"}]}},
        partition_by={"fields": ["_value.country", {"field": "_header.source", "name": "channel"}]},
    ),
    # parquet, Hive folders throughout, bytes key and headers, text value
    stream(
        "click-stream",
        encoding={"value": "text", "key": "bytes", "headers": "bytes"},
        format={"type": "parquet", "compression": "zstd"},
        partition_by={"fields": ["_key"], "style": "keys_and_values", "hour_folders": "hive"},
        event_time={"timezone": "Europe/Berlin"},
    ),
    stream("payments", format={"type": "avro", "value_schema": {"fields": ORDER_FIELDS}}),
    stream("events"),  # jsonl (zstd, the default), json values
    stream(
        "shipments",
        format={"type": "csv", "columns": ["partition", "offset", "event_time", "value.country", "value.price"]},
        partition_by={"fields": ["_value.carrier"], "hour_folders": "hive"},
    ),
    stream("logs", encoding={"value": "text"}, format={"type": "text", "compression": "zstd"}),
    stream("blobs", encoding={"value": "bytes"}, format={"type": "bytes"}),
]


@pytest.fixture(scope="module")
def catalog() -> ArchiveCatalog:
    return ArchiveCatalog(Stack(), "Catalog", streams=STREAMS, bucket_name=BUCKET, raw_prefix="raw", database="archive")


@pytest.fixture(scope="module")
def template(catalog: ArchiveCatalog) -> Template:
    return Template.from_stack(Stack.of(catalog))


def columns(*pairs: tuple[str, str]) -> list[dict[str, Any]]:
    return [{"Name": name, "Type": kind, "Comment": Match.any_value()} for name, kind in pairs]


def hour_keys() -> list[tuple[str, str]]:
    return [("year", "string"), ("month", "string"), ("day", "string"), ("hour", "string")]


HOUR_PROJECTION = {
    "projection.enabled": "true",
    "projection.year.type": "integer",
    "projection.year.range": "2020,2099",
    "projection.year.digits": "4",
    "projection.month.type": "integer",
    "projection.month.range": "1,12",
    "projection.month.digits": "2",
    "projection.day.type": "integer",
    "projection.day.range": "1,31",
    "projection.day.digits": "2",
    "projection.hour.type": "integer",
    "projection.hour.range": "0,23",
    "projection.hour.digits": "2",
}


def table_input(template: Template, name: str) -> dict[str, Any]:
    tables = template.find_resources(TABLE, {"Properties": {"TableInput": {"Name": name}}})
    assert len(tables) == 1, f"expected one table {name}, found {sorted(tables)}"
    return dict(next(iter(tables.values()))["Properties"]["TableInput"])


def test_the_database_and_one_table_per_stream_but_bytes(catalog: ArchiveCatalog, template: Template) -> None:
    template.has_resource_properties(
        "AWS::Glue::Database",
        {"CatalogId": {"Ref": "AWS::AccountId"}, "DatabaseInput": Match.object_like({"Name": "archive"})},
    )
    template.resource_count_is(TABLE, 6)
    assert catalog.database_name == "archive"
    assert catalog.table_names == {
        "orders": "orders",
        "click-stream": "click_stream",
        "payments": "payments",
        "events": "events",
        "shipments": "shipments",
        "logs": "logs",
    }
    assert catalog.streams_without_table == ("blobs",)
    database_id = next(iter(template.find_resources("AWS::Glue::Database")))
    for resource in template.find_resources(TABLE).values():
        assert resource["Properties"]["DatabaseName"] == "archive"
        assert resource["Properties"]["CatalogId"] == {"Ref": "AWS::AccountId"}
        assert resource["DependsOn"] == [database_id]
        assert resource["Properties"]["TableInput"]["TableType"] == "EXTERNAL_TABLE"


def test_parquet_with_values_folders_and_plain_hours(template: Template) -> None:
    template.has_resource_properties(
        TABLE,
        {
            "TableInput": {
                "Name": "orders",
                "Description": Match.string_like_regexp("orders"),
                "TableType": "EXTERNAL_TABLE",
                "StorageDescriptor": {
                    "Location": f"s3://{BUCKET}/raw/orders/",
                    "InputFormat": PARQUET_INPUT,
                    "OutputFormat": PARQUET_OUTPUT,
                    "SerdeInfo": {
                        "SerializationLibrary": "org.apache.hadoop.hive.ql.io.parquet.serde.ParquetHiveSerDe",
                        "Parameters": {"serialization.format": "1"},
                    },
                    "Columns": columns(
                        ("topic", "string"),
                        ("partition", "int"),
                        ("offset", "bigint"),
                        ("timestamp", "bigint"),
                        ("event_time", "timestamp"),
                        ("key", "string"),
                        ("value", ORDER_STRUCT[:-1] + ",country:string>"),
                        ("headers", "array<struct<key:string,value:string>>"),
                    ),
                },
                "PartitionKeys": columns(("country", "string"), ("channel", "string"), *hour_keys()),
                "Parameters": {
                    "EXTERNAL": "TRUE",
                    "typeOfData": "file",
                    "classification": "parquet",
                    **HOUR_PROJECTION,
                    "projection.country.type": "injected",
                    "projection.channel.type": "injected",
                    "storage.location.template": (
                        f"s3://{BUCKET}/raw/orders/${{country}}/${{channel}}/${{year}}/${{month}}/${{day}}/${{hour}}/"
                    ),
                },
            }
        },
    )


def test_parquet_with_hive_folders_bytes_key_and_headers(template: Template) -> None:
    table = table_input(template, "click_stream")
    descriptor = table["StorageDescriptor"]
    assert descriptor["InputFormat"] == PARQUET_INPUT
    assert descriptor["Location"] == f"s3://{BUCKET}/raw/click-stream/"
    types = {column["Name"]: column["Type"] for column in descriptor["Columns"]}
    assert types["key"] == "binary"
    assert types["value"] == "string"
    assert types["headers"] == "array<struct<key:string,value:binary>>"
    assert [key["Name"] for key in table["PartitionKeys"]] == ["record_key", "year", "month", "day", "hour"]
    assert "Europe/Berlin" in table["PartitionKeys"][1]["Comment"]
    assert table["Parameters"] == {
        "EXTERNAL": "TRUE",
        "typeOfData": "file",
        "classification": "parquet",
        **HOUR_PROJECTION,
        "projection.record_key.type": "injected",
        "storage.location.template": (
            f"s3://{BUCKET}/raw/click-stream/record_key=${{record_key}}/"
            "year=${year}/month=${month}/day=${day}/hour=${hour}/"
        ),
    }


def test_avro_with_a_value_schema(template: Template) -> None:
    literal = Capture()
    template.has_resource_properties(
        TABLE,
        {
            "TableInput": Match.object_like(
                {
                    "Name": "payments",
                    "StorageDescriptor": Match.object_like(
                        {
                            "InputFormat": "org.apache.hadoop.hive.ql.io.avro.AvroContainerInputFormat",
                            "OutputFormat": "org.apache.hadoop.hive.ql.io.avro.AvroContainerOutputFormat",
                            "SerdeInfo": {
                                "SerializationLibrary": "org.apache.hadoop.hive.serde2.avro.AvroSerDe",
                                "Parameters": {"avro.schema.literal": literal},
                            },
                            "Columns": columns(
                                ("topic", "string"),
                                ("partition", "int"),
                                ("offset", "bigint"),
                                ("timestamp", "bigint"),
                                ("event_time", "timestamp"),
                                ("key", "string"),
                                ("value", ORDER_STRUCT),
                                ("headers", "array<struct<key:string,value:string>>"),
                            ),
                        }
                    ),
                    "PartitionKeys": columns(*hour_keys()),
                }
            )
        },
    )
    schema = json.loads(literal.as_string())
    table = table_input(template, "payments")
    assert table["Parameters"]["avro.schema.literal"] == literal.as_string()
    assert table["Parameters"]["classification"] == "avro"
    assert table["Parameters"]["storage.location.template"] == (
        f"s3://{BUCKET}/raw/payments/${{year}}/${{month}}/${{day}}/${{hour}}/"
    )
    # the literal is the avro writer's schema, field for field
    payments = next(item for item in STREAMS if item.name == "payments")
    assert schema == avro_writer_schema(payments)
    fields = {item["name"]: item["type"] for item in schema["fields"]}
    assert list(fields) == ["topic", "partition", "offset", "timestamp", "event_time", "key", "value", "headers"]
    nullable, value = fields["value"]  # null: a tombstone
    assert nullable == "null"
    assert value["type"] == "record"
    assert [item["name"] for item in value["fields"]] == ["order_id", "price", "quantity", "gift"]


def writer_spec(config: StreamConfig) -> RenderSpec:
    """What the archiver renders the stream's objects with."""
    return RenderSpec.decode(StreamContext.build(config, ArchiveSettings(), ManualClock()).spec)


def avro_writer_schema(config: StreamConfig) -> dict[str, Any]:
    from tidemark.formats.avro import avro_schema as writer_schema  # fastavro: the formats layer

    return writer_schema(writer_spec(config).context(0))


@pytest.mark.parametrize(
    "config",
    [
        stream("a", format={"type": "avro"}),
        stream("b", encoding={"value": "bytes", "key": "bytes", "headers": "bytes"}, format={"type": "avro"}),
        stream("c", encoding={"value": "text"}, format={"type": "avro", "compression": "null"}),
        STREAMS[2],
    ],
    ids=["json", "bytes", "text", "value-schema"],
)
def test_the_avro_literal_is_the_writer_schema(config: StreamConfig) -> None:
    assert avro_schema(config) == avro_writer_schema(config)


def test_jsonl_reads_with_the_openx_serde(template: Template) -> None:
    table = table_input(template, "events")
    descriptor = table["StorageDescriptor"]
    assert descriptor["InputFormat"] == TEXT_INPUT
    assert descriptor["OutputFormat"] == TEXT_OUTPUT
    assert descriptor["SerdeInfo"] == {
        "SerializationLibrary": "org.openx.data.jsonserde.JsonSerDe",
        "Parameters": {"ignore.malformed.json": "FALSE", "dots.in.keys": "FALSE", "case.insensitive": "TRUE"},
    }
    # a json value is declared string: the OpenX SerDe hands an object over as its JSON text
    assert [(column["Name"], column["Type"]) for column in descriptor["Columns"]] == [
        ("topic", "string"),
        ("partition", "int"),
        ("offset", "bigint"),
        ("timestamp", "bigint"),
        ("event_time", "timestamp"),
        ("key", "string"),
        ("value", "string"),
        ("headers", "array<struct<key:string,value:string>>"),
        ("tombstone", "boolean"),  # true on a tombstone's line: "value" is null for the JSON text null too
    ]
    assert table["Parameters"] == {
        "EXTERNAL": "TRUE",
        "typeOfData": "file",
        "classification": "json",
        "compressionType": "zstd",
        **HOUR_PROJECTION,
        "storage.location.template": f"s3://{BUCKET}/raw/events/${{year}}/${{month}}/${{day}}/${{hour}}/",
    }


def test_csv_skips_its_header_row(template: Template) -> None:
    template.has_resource_properties(
        TABLE,
        {
            "TableInput": Match.object_like(
                {
                    "Name": "shipments",
                    "StorageDescriptor": Match.object_like(
                        {
                            "InputFormat": TEXT_INPUT,
                            "OutputFormat": TEXT_OUTPUT,
                            "SerdeInfo": {
                                "SerializationLibrary": "org.apache.hadoop.hive.serde2.OpenCSVSerde",
                                "Parameters": Match.object_like({"separatorChar": ",", "quoteChar": '"'}),
                            },
                            "Columns": columns(
                                ("partition", "string"),
                                ("offset", "string"),
                                ("event_time", "string"),
                                ("value_country", "string"),
                                ("value_price", "string"),
                            ),
                        }
                    ),
                    "PartitionKeys": columns(("carrier", "string"), *hour_keys()),
                    "Parameters": {
                        "EXTERNAL": "TRUE",
                        "typeOfData": "file",
                        "classification": "csv",
                        "compressionType": "zstd",
                        "skip.header.line.count": "1",
                        **HOUR_PROJECTION,
                        "projection.carrier.type": "injected",
                        "storage.location.template": (
                            f"s3://{BUCKET}/raw/shipments/${{carrier}}/year=${{year}}/month=${{month}}/day=${{day}}/"
                            "hour=${hour}/"
                        ),
                    },
                }
            )
        },
    )


def test_text_is_one_value_column(template: Template) -> None:
    table = table_input(template, "logs")
    descriptor = table["StorageDescriptor"]
    assert descriptor["SerdeInfo"]["SerializationLibrary"] == "org.apache.hadoop.hive.serde2.lazy.LazySimpleSerDe"
    assert [(column["Name"], column["Type"]) for column in descriptor["Columns"]] == [("value", "string")]
    assert table["Parameters"]["compressionType"] == "zstd"
    assert "classification" not in table["Parameters"]


def test_bytes_streams_get_no_table() -> None:
    assert describe_table(STREAMS[-1], bucket=BUCKET, raw_prefix="raw") is None
    lone = ArchiveCatalog(Stack(), "Catalog", streams=[STREAMS[-1]], bucket_name=BUCKET, raw_prefix="raw")
    template = Template.from_stack(Stack.of(lone))
    template.resource_count_is(TABLE, 0)
    template.resource_count_is("AWS::Glue::Database", 1)
    assert lone.table_names == {}
    assert lone.streams_without_table == ("blobs",)


def test_year_range_comes_from_the_settings() -> None:
    catalog = ArchiveCatalog(
        Stack(), "Catalog", streams=[STREAMS[3]], bucket_name=BUCKET, raw_prefix="archive", years=(2024, 2030)
    )
    table = table_input(Template.from_stack(Stack.of(catalog)), "events")
    assert table["Parameters"]["projection.year.range"] == "2024,2030"
    assert table["Parameters"]["storage.location.template"].startswith(f"s3://{BUCKET}/archive/events/")
    assert table["StorageDescriptor"]["Location"] == f"s3://{BUCKET}/archive/events/"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"database": "Tidemark"}, r"catalog\.database: 'Tidemark' is not a database name Glue and Athena accept"),
        ({"database": "my-archive"}, r"catalog\.database: 'my-archive'"),
        ({"database": ""}, r"catalog\.database: ''"),
        ({"database": "a" * 256}, r"catalog\.database"),
        ({"bucket_name": "Not_A_Bucket"}, r"'Not_A_Bucket' is not an S3 bucket name"),
        ({"raw_prefix": "raw/x"}, r"archive\.raw_prefix: 'raw/x'"),
        ({"years": (2030, 2020)}, r"year range 2030\.\.2020"),
        (
            {"streams": [stream("a-b"), stream("a_b")]},
            r"catalog: streams a-b and a_b would both be table a_b",
        ),
        (
            {"streams": [stream("s", format={"type": "csv", "columns": ["value.a_b", "value.a.b"]})]},
            r"csv columns 'value\.a_b' and 'value\.a\.b' would both be table column 'value_a_b'",
        ),
        (
            {
                "streams": [
                    stream(
                        "s",
                        format={"type": "csv", "columns": ["value.region"]},
                        partition_by={"fields": [{"field": "_key", "name": "value_region"}]},
                    )
                ]
            },
            r"\['value_region'\] would be both a column and a partition key",
        ),
    ],
)
def test_bad_input_fails_synth_with_a_clear_error(kwargs: dict[str, Any], message: str) -> None:
    arguments: dict[str, Any] = {"streams": [STREAMS[3]], "bucket_name": BUCKET, "raw_prefix": "raw"} | kwargs
    with pytest.raises(ConfigError, match=message):
        ArchiveCatalog(Stack(), "Catalog", **arguments)


def test_the_configuration_refuses_a_bad_database_name(example_config: TidemarkConfig) -> None:
    with pytest.raises(ConfigError, match=r"catalog\.database: 'Tidemark-Archive' is not a database name"):
        with_changes(example_config, catalog={"enabled": True, "database": "Tidemark-Archive"})
    with pytest.raises(ConfigError, match=r"first_year \(2030\) is after last_year \(2029\)"):
        with_changes(example_config, catalog={"first_year": 2030, "last_year": 2029})


def test_the_stack_wires_the_catalog_to_the_archive_bucket(example_config: TidemarkConfig) -> None:
    config = with_changes(example_config, catalog={"enabled": True, "database": "orders_archive"})
    assert "catalog" not in json.loads(config.runtime_json())  # deployment-only: the functions never see it
    stack, template = synth_stack(config)
    assert stack.catalog is not None
    bucket = {"Ref": stack.resolve(stack.storage.bucket.node.default_child.logical_id)}  # type: ignore[union-attr]
    template.has_resource_properties(
        TABLE,
        {
            "DatabaseName": "orders_archive",
            "TableInput": Match.object_like(
                {
                    "Name": "orders",
                    "StorageDescriptor": Match.object_like(
                        {"Location": {"Fn::Join": ["", ["s3://", bucket, "/raw/orders/"]]}}
                    ),
                    "Parameters": Match.object_like(
                        {
                            "storage.location.template": {
                                "Fn::Join": ["", ["s3://", bucket, "/raw/orders/${year}/${month}/${day}/${hour}/"]]
                            }
                        }
                    ),
                }
            ),
        },
    )
    template.has_output("CatalogDatabaseName", {"Value": "orders_archive"})
    # cdk-nag's AwsSolutions pack (the stack applies it) has nothing to say about the catalog
    nag = Match.string_like_regexp(r"^(AwsSolutions-|CdkNagValidationFailure).*")
    annotations = Annotations.from_stack(stack)
    assert annotations.find_error("*", nag) + annotations.find_warning("*", nag) == []


def test_the_stack_has_no_catalog_unless_enabled(example_config: TidemarkConfig) -> None:
    stack, template = synth_stack(example_config, nag=False)
    assert stack.catalog is None
    template.resource_count_is("AWS::Glue::Database", 0)
    template.resource_count_is(TABLE, 0)


def opencsv_line(line: str, separator: str, quote: str, escape: str, columns: int) -> list[str | None]:
    """One line as Athena's OpenCSV SerDe reads it: Trino's ``CsvDeserializer.parseLine`` (itself
    "bug for bug compatible with OpenCSVSerde"), ported line for line."""
    values: list[str | None] = [None] * columns
    buffer: list[str] = []
    column, in_quotes, in_field, position = 0, False, False, 0

    def peek() -> str | None:
        return line[position + 1] if position + 1 < len(line) else None

    while line and position < len(line) and column < columns:
        char = line[position]
        if char == escape:
            if (in_quotes or in_field) and peek() in (quote, escape):
                buffer.append(line[position + 1])
                position += 1
        elif char == quote:
            if (in_quotes or in_field) and peek() == quote:
                buffer.append(line[position + 1])
                position += 1
            else:
                if (
                    position > 2
                    and line[position - 1] != separator
                    and len(line) > position + 1
                    and line[position + 1] != separator
                ):
                    if buffer and all(item.isspace() for item in buffer):
                        buffer.clear()
                    else:
                        buffer.append(char)
                in_quotes = not in_quotes
            in_field = not in_field
        elif char == separator and not in_quotes:
            values[column] = "".join(buffer)
            column += 1
            buffer.clear()
            in_field = False
        else:
            buffer.append(char)
            in_field = True
        position += 1
    if line and column < columns and not in_quotes:
        values[column] = "".join(buffer)
    return values


def test_the_csv_serde_reads_every_cell_the_csv_writer_writes() -> None:
    """Quotes, backslashes (JSON escapes), commas, empty and null cells, non-ASCII: each cell reads
    back as written. The SerDe's default escape character, a backslash, would not."""
    config = stream(
        "s", format={"type": "csv", "compression": "none", "columns": ["offset", "key", "value", "value.n"]}
    )
    values: list[dict[str, Any]] = [
        {"n": 'say \\"hi\\", then \\\\ leave', "m": 1},
        {"n": '"quoted"', "m": "a,b"},
        {"n": "", "m": None},
        {"m": "ünïcödé ✓"},
        {"n": "\\", "m": "trailing \\"},
    ]
    keys: list[bytes | None] = [b"k,1", b'k"2', None, b"", b"k\\5"]
    raw = [orjson.dumps(value) for value in values]
    frames = [Frame(RAW, offset, 0, 0, key, data) for offset, (key, data) in enumerate(zip(keys, raw, strict=True))]
    spec = writer_spec(config)
    out = io.BytesIO()
    format_for("csv", "none").write(frames, spec.context(0), out)
    table = describe_table(config, bucket=BUCKET, raw_prefix="raw")
    assert table is not None and table.parameters["skip.header.line.count"] == "1"
    serde = table.serde_parameters
    lines = out.getvalue().decode("utf-8").split("\n")
    assert lines[-1] == ""
    rows = [
        opencsv_line(line, serde["separatorChar"], serde["quoteChar"], serde["escapeChar"], len(table.columns))
        for line in lines[1:-1]
    ]
    assert rows == [
        [str(offset), (key or b"").decode(), data.decode(), value.get("n", "")]
        for offset, (key, data, value) in enumerate(zip(keys, raw, values, strict=True))
    ]
    with_backslash = [opencsv_line(line, ",", '"', "\\", 4) for line in lines[1:-1]]
    assert with_backslash != rows
