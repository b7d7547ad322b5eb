"""Issue 30's property test: generated values (big and tiny numbers, mixed types per field across
objects and hours, nested timestamps, lists, unicode and long keys, envelope-like names, values
that are no JSON object) archived through the real archiver into moto, aggregated by both readers
(the Arrow reader over moto, Spark's own over a ``file://`` copy), every stored item equal to a
plain-Python reference (``tests/support/aggregation_properties.py``; float sums within 1e-12 of
their terms' magnitudes). A few seeds here; ``bench/aggregation_properties.py`` runs many.

Below them, each defect the generated cases found, as a minimal case of its own: the fixed ones
failed first.
"""

from __future__ import annotations

import json

import pytest

from tests.conftest import make_archive
from tests.support.aggregation_properties import (
    Case,
    CaseResult,
    Metric,
    Spec,
    case_of,
    make_case,
    reference_items,
    run_case,
)
from tests.support.benches import assert_smoke_passes
from tidemark.config.model import AggregationConfig

#: a few small seeds here -- JSON Lines and Parquet, each with an hour Spark's readers read and a
#: value field an envelope column shadows; one has an hour that must fail alone (an integer sum
#: beyond int64, say), the other a field no record has (the bench's smoke run takes 0 and 1)
SEEDS = (44, 72)
RECORDS = 60
HOUR, LATER, LAST = "2026-11-21T08", "2026-11-21T09", "2026-11-21T10"


def run(spark, archive, tmp_path, case: Case) -> CaseResult:
    result = run_case(spark, archive, case, tmp_path)
    assert result.ok, "\n".join([f"seed {case.seed} ({case.shape}):", *result.problems[:20]])
    return result


def test_generated_values_are_stored_as_the_reference_says_by_both_readers(spark, archive, tmp_path):
    results = []
    for seed in SEEDS:  # an archive of its own each
        fresh = make_archive(archive.endpoint, tmp_path / f"seed-{seed}")
        results.append(run(spark, fresh, tmp_path / f"work-{seed}", make_case(seed, records=RECORDS)))
    # The seeds are not idle: both tables hold every reference item, some keyed by a digest, with
    # float sums among them; Spark's own readers read some objects; a shadowed field was refused;
    # an hour failed alone, as the reference says; a field no record has was read as null.
    assert all(result.items >= 80 and result.objects >= 4 for result in results), results
    assert sum(result.hashed_keys for result in results) > 0
    assert sum(result.float_sums for result in results) > 0
    assert sum(result.native_objects for result in results) > 0
    assert sum(result.refusals for result in results) > 0
    assert sum(result.failed_hours for result in results) > 0
    assert sum(result.absent_fields for result in results) > 0


def test_the_reference_gives_the_exact_values_tests_figures_where_their_reference_applies():
    """The reference extends the hand-written one of ``test_aggregation_exact_values`` (fields
    of one kind each, values that are no object, names differing in case): on that test's
    inputs both give the same items' figures. No Spark: the references alone."""
    from tests.integration import test_aggregation_exact_values as exact

    for values, group_by, prices in (
        (exact.NOT_OBJECTS, ["tag"], ["price"]),
        (exact.CASES, ["tag", "Tag"], ["price", "Price"]),
    ):
        metrics = {"n": Metric("count_all"), **{f"total_{p}": Metric("sum", (p,)) for p in prices}}
        case = case_of({HOUR: values}, [Spec("s", tuple(group_by), metrics)])
        mine = {(hour, sk): item["metrics"] for (_name, hour, sk), (item, _sums) in reference_items(case).items.items()}
        theirs = exact.reference(
            {HOUR: values}, group_by, {"n": exact.count, **{f"total_{p}": exact.total(p) for p in prices}}
        )
        assert mine == exact.as_numbers(theirs)


@pytest.mark.xdist_group("spark")  # its own JVM: one Spark at a time on the worker of the Spark tests
def test_the_bench_runs_in_smoke_mode():
    assert_smoke_passes("aggregation_properties.py")


# -- defects the generated cases found -----------------------------------------------------------------

BY_TAGS = Spec("by_tags", ("tags",), {"records": Metric("count_all"), "skus": Metric("distinct", ("sku",))})
BY_REGION = Spec(
    "by_region",
    ("meta.region",),
    {"records": Metric("count_all"), "first": Metric("min", ("meta", "at")), "n": Metric("sum", ("n",))},
)


def test_a_list_field_is_an_array_in_every_hour_whatever_else_its_objects_hold(spark, archive, tmp_path):
    """``tags`` holds lists of strings in every record. Failing first: an object that took the
    Arrow reader's Python path -- here for a run of 19 digits in another field's string, or
    for ``n`` changing type between its records -- read every list as text, so the hour held
    ``tags`` as text (``{"tags":"[\\"a\\"]"}``) where an hour of plain objects held an array
    (``{"tags":["a"]}``); and an object whose lists were all empty (``list<null>``) turned its
    hour's lists into text too."""
    case = case_of(
        {
            HOUR: ['{"tags":["a"]}', '{"tags":["a","b"]}', '{"tags":["a"],"sku":"order-1234567890123456789"}'],
            LATER: ['{"tags":["a"],"n":1}', '{"tags":["b"],"n":"x"}', '{"tags":["a"]}'],
            LAST: ['{"tags":[]}', '{"tags":[]}', '{"tags":["a"]}', '{"tags":["a"]}'],
        },
        [BY_TAGS],
        max_records=2,
    )
    result = run(spark, archive, tmp_path, case)
    assert result.items == 6  # hour 08: ["a"], ["a","b"]; 09: ["a"], ["b"]; 10: [], ["a"]


def test_a_field_null_in_every_record_of_an_object_takes_its_hours_type(spark, archive, tmp_path):
    """``meta`` is an object, but null in every record of one object that took the Python path
    (a 20-digit ``id``). Failing first: that object typed ``meta`` text, so its hour did, and
    ``meta.region`` failed the whole run (``INVALID_EXTRACT_BASE_FIELD_TYPE``)."""
    case = case_of(
        {
            HOUR: [
                '{"meta":{"region":"eu","at":"2026-11-21T08:00:00Z"},"n":1}',
                '{"meta":null,"id":12345678901234567890}',
            ]
        },
        [BY_REGION],
        max_records=1,
    )
    run(spark, archive, tmp_path, case)


def test_a_field_null_in_every_record_of_an_hour_takes_the_runs_type(spark, archive, tmp_path):
    """``meta`` is null in every record of hour 09: the hour has no value for it, as if it were
    missing, so ``meta.region`` is null there. Failing first: the hour typed ``meta`` text and
    ``meta.region`` failed the whole run."""
    case = case_of(
        {HOUR: ['{"meta":{"region":"eu","at":"2026-11-21T08:00:00Z"},"n":1}'], LATER: ['{"meta":null,"n":2}']},
        [BY_REGION],
    )
    run(spark, archive, tmp_path, case)


def test_a_nested_field_of_numbers_and_text_holds_each_number_as_its_token(spark, archive, tmp_path):
    """``meta.score`` holds numbers in some objects and text in others, so it is text in the
    hour, each number its JSON token (finding 3, one level down). Failing first: an object of
    numbers only was read by Arrow's JSON reader and its struct cast to the hour's type, which
    renders ``1000.0`` as ``1000``, ``1e22`` as ``1e+22`` and ``-0.0`` as ``-0``: groups the
    reference keys ``{"meta.score":"1000.0"}`` were keyed ``{"meta.score":"1000"}``."""
    by_score = Spec(
        "by_score", ("meta.score",), {"records": Metric("count_all"), "low": Metric("min", ("meta", "score"))}
    )
    numbers = [
        '{"meta":{"score":1000.0}}',
        '{"meta":{"score":1e22}}',
        '{"meta":{"score":-0.0}}',
        '{"meta":{"score":2}}',
    ]
    case = case_of(
        {HOUR: [*numbers, '{"meta":{"score":"abc"}}', '{"meta":{"score":"1000.0"}}']}, [by_score], max_records=4
    )
    result = run(spark, archive, tmp_path, case)
    assert result.items == 5  # 1000.0 (the number and the text), 1e22, -0.0, 2, abc


@pytest.mark.parametrize("format", ["jsonl-gzip", "parquet"])
def test_a_null_value_first_in_an_object_is_a_record_without_fields(spark, archive, tmp_path, format):
    """A value that is the JSON ``null`` (archived: the event time is not read from the value)
    first in an object. Failing first: Arrow's JSON reader (pyarrow 26) crashes the process on
    a ``null`` at the start of its input -- or of any 1 MiB block of it --, so the Python worker
    died (``Python worker exited unexpectedly (crashed)``) and with it the whole run, and every
    later run while the hour stayed dirty."""
    spec = Spec("records", (), {"records": Metric("count_all"), "n": Metric("sum", ("n",))})
    case = case_of({HOUR: ["null", '{"n":1}', "null", "null", '{"n":2}']}, [spec], format=format, max_records=2)
    run(spark, archive, tmp_path, case)


def test_value_fields_differing_from_envelope_columns_only_in_case_are_aggregated(spark, archive, tmp_path):
    """``Offset`` and ``Hour`` are value fields beside a value field ``offset`` (which the
    envelope's ``offset`` shadows): field names are case-sensitive, so an aggregation naming
    ``Offset`` or ``Hour`` names those fields, and one naming ``offset`` is refused. Failing
    first: the refusal compared names case-insensitively and refused both runs."""
    twins = Spec(
        "twins",
        ("Hour",),
        {"records": Metric("count_all"), "offsets": Metric("sum", ("Offset",)), "last": Metric("max", ("event_time",))},
    )
    values = [json.dumps({"offset": 3600, "Offset": n, "Hour": n % 2}) for n in range(5)]
    refused = AggregationConfig(name="refused", metrics={"shadowed": "max(offset)"})
    result = run(spark, archive, tmp_path, case_of({HOUR: values}, [twins], refused=refused))
    assert result.refusals == 1 and result.items == 2


def test_an_integer_sum_beyond_int64_or_38_digits_fails_its_hour_loudly(spark, archive, tmp_path):
    """Three values of 2**62 in a long field (hour 08) sum to 3 * 2**62, beyond int64; six
    38-digit values of a decimal(38,0) field (hour 09) sum beyond 38 digits. Failing first:
    Spark's ``sum`` (ANSI mode off) wrapped the first around to -2**62 and made the second
    null, and the items stored those, silently; the first run with the guard raised Spark's
    overflow error for the second from the merge of its partial sums. Now each hour fails alone, its reason naming
    the sum; hour 10 (one such value each) is aggregated exactly."""
    total = Spec("total", (), {"n": Metric("sum", ("n",)), "big": Metric("sum", ("big",))})
    values = {
        HOUR: [json.dumps({"n": 2**62}) for _ in range(3)],
        LATER: [json.dumps({"big": 9 * 10**37}) for _ in range(6)],
        LAST: [json.dumps({"n": 2**62, "big": 9 * 10**37})],
    }
    result = run(spark, archive, tmp_path, case_of(values, [total]))
    assert result.failed_hours == 2 and result.items == 1
    assert set(result.reasons) == {HOUR, LATER}
    assert "tidemark: sum overflow: sum(`n`) is beyond int64" in result.reasons[HOUR]
    # a decimal sum's overflow: Spark's own error where its merge of partial sums sees it first
    decimal = (
        "tidemark: sum overflow: sum(`big`) is beyond 38 digits",
        "[ARITHMETIC_OVERFLOW] Overflow in sum of decimals",
    )
    assert any(reason in result.reasons[LATER] for reason in decimal), result.reasons[LATER]


def test_an_aggregation_one_hours_types_cannot_resolve_fails_that_hour_only(spark, archive, tmp_path):
    """``amount`` is a number in hour 08 and only ever a boolean in hour 09, and ``meta`` is only
    ever text in hour 10: ``sum(amount)`` and ``meta.region`` cannot be resolved over those
    hours' types. Failing first: the AnalysisException failed the whole run -- and, the hours
    staying dirty, every later run. Now hours 09 and 10 fail alone, each reason naming the
    metric or group column; hour 08 is written, and a second run again fails only them."""
    spec = Spec("amounts", ("meta.region",), {"amount": Metric("sum", ("amount",))})
    values = {
        HOUR: ['{"amount":1,"meta":{"region":"eu"}}', '{"amount":2.5}'],
        LATER: ['{"amount":true,"meta":{"region":"eu"}}'],
        LAST: ['{"amount":3,"meta":"n/a"}'],
    }
    result = run(spark, archive, tmp_path, case_of(values, [spec]))
    assert result.failed_hours == 2 and result.items == 2  # hour 08: regions "eu" and null
    assert "aggregation 'amounts', metric amount = sum(`amount`)" in result.reasons[LATER]
    assert "BOOLEAN" in result.reasons[LATER]
    assert "aggregation 'amounts', group_by meta.region" in result.reasons[LAST]


def test_a_field_no_record_of_the_run_has_is_null(spark, archive, tmp_path):
    """An aggregation names ``refund``, a field only some hours' records have (a rare event),
    and ``meta.refund`` where ``meta`` is an object without it: a run whose hours have none
    -- late data for one of them, say -- is one where no record has them. Failing first: the
    run failed whole (``UNRESOLVED_COLUMN``), and every later run while that hour stayed dirty.
    Now they are null there, as in an hour of a run where other hours have them, and the run
    names them (``RunReport.absent``)."""
    spec = Spec(
        "refunds",
        (),
        {
            "records": Metric("count_all"),
            "refunds": Metric("sum", ("refund",)),
            "meta_refunds": Metric("max", ("meta", "refund")),
        },
    )
    result = run(spark, archive, tmp_path, case_of({HOUR: ['{"amount":1,"meta":{"region":"eu"}}']}, [spec]))
    assert result.items == 1
    assert {name: sorted(paths) for name, paths in result.absent.items()} == {"refunds": ["meta.refund", "refund"]}
