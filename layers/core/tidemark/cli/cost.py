"""``tidemark cost``: the monthly cost of archiving a workload with Tidemark, part by part, next to
Amazon Data Firehose (MSK source) and MSK Connect with an S3 sink (``tidemark.cost``).

Only us-east-1 list prices are known: any other ``--region`` is refused (exit 2) rather than
priced with figures that may not hold there."""

from __future__ import annotations

import json
from typing import Annotated, Literal

import typer

from tidemark.cli.errors import one_line_errors
from tidemark.cli.target import JsonOption
from tidemark.cost import prices
from tidemark.cost.model import Estimate, LineItem, Workload, estimate, msk_connect_mcus, total
from tidemark.exceptions import ConfigError


def cost(
    mb_per_s: Annotated[float, typer.Option("--mb-per-s", help="Sustained record bytes per second, in MB (10^6).")],
    record_bytes: Annotated[int, typer.Option(help="Mean record (value) size in bytes.")],
    partitions: Annotated[int, typer.Option(help="Partitions (or shards) of the topic.")],
    region: Annotated[str, typer.Option(help="AWS region; only us-east-1's list prices are known.")] = prices.REGION,
    provisioned_pollers: Annotated[
        int | None, typer.Option(help="Price the ESM's provisioned mode with this many EPUs all month.")
    ] = None,
    efs: Annotated[
        str | None, typer.Option(help="Price this EFS throughput mode (elastic | provisioned); default: the cheaper.")
    ] = None,
    endpoint_azs: Annotated[
        int, typer.Option(min=0, help="AZs of the STS and Lambda interface endpoints (0: the VPC has its own).")
    ] = 2,
    aggregations: Annotated[bool, typer.Option(help="Include the hourly EMR Serverless aggregation job.")] = True,
    msk_connect_mb_per_s_per_mcu: Annotated[
        float, typer.Option(min=0.001, help="Assumed S3-sink throughput of one MSK Connect MCU (not measured).")
    ] = 5.0,
    protection: Annotated[
        str, typer.Option(help="Price archive.protection: none | versioning | object_lock.")
    ] = "none",
    object_lock_days: Annotated[
        int, typer.Option(min=0, help="With --protection object_lock: the default retention, in days.")
    ] = 0,
    as_json: JsonOption = False,
) -> None:
    """Monthly cost of Tidemark's parts for a sustained load, at list prices (us-east-1, effective
    2025-10-01) and the project's measured handler speed and ledger item size, beside Firehose and
    MSK Connect."""
    with one_line_errors():
        if region != prices.REGION:
            raise ConfigError(
                f"--region {region}: only {prices.REGION} list prices are known "
                f"(effective {prices.PRICES_EFFECTIVE}); refusing to guess another region's"
            )
        if efs not in (None, "elastic", "provisioned"):
            raise ConfigError(f"--efs must be elastic or provisioned, got {efs!r}")
        mode: Literal["elastic", "provisioned"] | None = efs  # type: ignore[assignment]
        if protection not in ("none", "versioning", "object_lock"):
            raise ConfigError(f"--protection must be none, versioning or object_lock, got {protection!r}")
        result = estimate(
            Workload(
                mb_per_s=mb_per_s,
                record_bytes=record_bytes,
                partitions=partitions,
                provisioned_pollers=provisioned_pollers,
                efs_mode=mode,
                endpoint_azs=endpoint_azs,
                aggregations=aggregations,
                msk_connect_mb_per_s_per_mcu=msk_connect_mb_per_s_per_mcu,
                protection=protection,  # type: ignore[arg-type]  # checked above
                object_lock_days=object_lock_days,
            )
        )
        if as_json:
            print(json.dumps(result.to_json(), indent=2))
        else:
            print(render(result))


def _table(items: list[LineItem]) -> list[str]:
    lines = [f"  {'item':<62} {'quantity':>16} {'unit price':>14}  {'monthly $':>11}"]
    part = None
    for item in items:
        if item.part != part:
            part = item.part
            subtotal = total([other for other in items if other.part == part])
            lines.append(f"{part} (${subtotal:,.2f})")
        lines.append(
            f"  {item.item:<62} {item.quantity:>16,.2f} {_price(item.unit_price):>14}  {item.monthly:>11,.2f}"
            f"  per {item.unit}"
        )
    return lines


def _price(dollars: float) -> str:
    """Every significant digit of a list price, at least two decimals ($6.00, $0.0000133334)."""
    whole, _, fraction = f"{dollars:.10f}".partition(".")
    return f"${whole}.{fraction.rstrip('0').ljust(2, '0')}"


def render(result: Estimate) -> str:
    w = result.workload
    out = [
        f"Tidemark monthly cost: {w.mb_per_s:g} MB/s of {w.record_bytes}-byte records "
        f"({w.records_per_s:,.0f} records/s) over {w.partitions} partitions; {prices.REGION} list prices "
        f"effective {prices.PRICES_EFFECTIVE}",
        "",
        *_table(result.tidemark),
        f"Tidemark total: ${total(result.tidemark):,.2f}/month "
        f"(archiving only, without EMR Serverless: ${result.tidemark_archiving:,.2f})",
        "",
        f"EFS throughput: {result.efs.reason}",
        "",
        "Side by side (archiving only):",
        f"  {'Tidemark':<40} ${result.tidemark_archiving:>12,.2f}",
        f"  {'Amazon Data Firehose (MSK source)':<40} ${total(result.firehose):>12,.2f}",
        f"  {f'MSK Connect, S3 sink ({msk_connect_mcus(w)} MCU)':<40} ${total(result.msk_connect):>12,.2f}",
        "",
        *_table(result.firehose),
        *_table(result.msk_connect),
        "",
        *(f"note: {note}" for note in result.notes),
    ]
    return "\n".join(out)
