"""The archive in the Glue Data Catalog: one database, one table per stream, partition projection.

Athena then queries the archive with no crawler and no partition to add: each table's
``storage.location.template`` spells the stream's folders (``tidemark.catalog``), so an hour is
queryable as soon as its first object lands. Streams with ``format: bytes`` get no table.
aws-cdk-lib has only the L1 Glue resources, which is all this needs.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from aws_cdk import Stack, Token
from aws_cdk import aws_glue as glue
from constructs import Construct

from tidemark.catalog import CatalogError, Column, TableDescription, describe_tables
from tidemark.config.deployment import GLUE_DATABASE_NAME
from tidemark.config.model import StreamConfig
from tidemark.exceptions import ConfigError
from tidemark.names import S3_PREFIX

BUCKET_NAME = r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$"


class ArchiveCatalog(Construct):
    """``database`` (``AWS::Glue::Database``) and one ``AWS::Glue::Table`` per stream that has one.

    ``bucket_name`` may be a token (the stack's archive bucket). Bad input raises ``ConfigError``
    naming what is wrong, at synth."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        streams: Sequence[StreamConfig],
        bucket_name: str,
        raw_prefix: str,
        database: str = "tidemark",
        years: tuple[int, int] = (2020, 2099),
    ) -> None:
        super().__init__(scope, construct_id)
        _validate(bucket_name=bucket_name, raw_prefix=raw_prefix, database=database, years=years)
        try:
            descriptions = describe_tables(streams, bucket=bucket_name, raw_prefix=raw_prefix, years=years)
        except CatalogError as exc:
            raise ConfigError(f"catalog: {exc}") from None
        account = Stack.of(self).account
        self.database_name = database
        self.database = glue.CfnDatabase(
            self,
            "Database",
            catalog_id=account,
            database_input=glue.CfnDatabase.DatabaseInputProperty(
                name=database, description="Tidemark archive: one table per stream (Athena partition projection)"
            ),
        )
        self.descriptions: dict[str, TableDescription] = {table.stream: table for table in descriptions}
        self.tables: dict[str, glue.CfnTable] = {}
        for table in descriptions:
            resource = glue.CfnTable(
                self,
                f"Table{_pascal(table.stream)}",
                catalog_id=account,
                database_name=database,
                table_input=_input(table),
            )
            resource.add_dependency(self.database)
            self.tables[table.stream] = resource
        #: streams without a table (format bytes)
        self.streams_without_table = tuple(s.name for s in streams if s.name not in self.descriptions)

    @property
    def table_names(self) -> dict[str, str]:
        """Stream name -> table name, for the streams that have a table."""
        return {stream: table.name for stream, table in self.descriptions.items()}


def _validate(*, bucket_name: str, raw_prefix: str, database: str, years: tuple[int, int]) -> None:
    if not re.match(GLUE_DATABASE_NAME, database):
        raise ConfigError(
            f"catalog.database: {database!r} is not a database name Glue and Athena accept unquoted "
            "(lower-case letters, digits and _, starting with a letter, at most 255 characters)"
        )
    if not re.match(S3_PREFIX, raw_prefix):
        raise ConfigError(f"archive.raw_prefix: {raw_prefix!r} is not an archive prefix")
    if not Token.is_unresolved(bucket_name) and not re.match(BUCKET_NAME, bucket_name):
        raise ConfigError(f"catalog: {bucket_name!r} is not an S3 bucket name")
    first, last = years
    if not 1970 <= first <= last <= 9999:
        raise ConfigError(f"catalog: year range {first}..{last} is not a range of years from 1970 to 9999")


def _pascal(name: str) -> str:
    return "".join(part.capitalize() for part in re.split(r"[-_]", name))


def _columns(columns: Sequence[Column]) -> list[glue.CfnTable.ColumnProperty]:
    """Glue column properties (a comment is at most 255 characters there)."""
    return [
        glue.CfnTable.ColumnProperty(name=column.name, type=column.type, comment=column.comment[:255] or None)
        for column in columns
    ]


def _input(table: TableDescription) -> glue.CfnTable.TableInputProperty:
    return glue.CfnTable.TableInputProperty(
        name=table.name,
        description=table.description,
        table_type="EXTERNAL_TABLE",
        parameters=dict(table.parameters),
        partition_keys=_columns(table.partition_keys),
        storage_descriptor=glue.CfnTable.StorageDescriptorProperty(
            columns=_columns(table.columns),
            location=table.location,
            input_format=table.input_format,
            output_format=table.output_format,
            serde_info=glue.CfnTable.SerdeInfoProperty(
                serialization_library=table.serde, parameters=dict(table.serde_parameters)
            ),
        ),
    )
