"""The FOCUS export against the FOCUS 1.2 normative requirements of every column it claims.

Each check is one row of `RULES`: the rule id of the FOCUS 1.2 specification (the ids of the
FinOps Foundation's focus-validator model, `model-1.2.json`), the requirement, and a predicate run
over a rated month (a closed September, October with unallocated use, SLA breaches and a correction
of September). `NOT_APPLICABLE` records the rules of the claimed columns that no row can exercise.
The same export passed focus-validator 2.0.1 (FOCUS 1.2 model) when this suite was written; the
README says how to run it.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections import defaultdict
from collections.abc import Callable
from decimal import Decimal, InvalidOperation

import pytest

from app.billing import exports, periods
from app.billing.invoices import load_view, tenant_invoice
from app.billing.types import LineKind
from tests.support.billing import EXAMPLE_USAGE, fill_month, store_policy

Row = dict[str, str | None]

# Columns the export fills, with their FOCUS 1.2 data type.
DECIMAL = ["BilledCost", "ContractedCost", "EffectiveCost", "ListCost", "PricingQuantity", "ConsumedQuantity"]
DATETIME = ["BillingPeriodStart", "BillingPeriodEnd", "ChargePeriodStart", "ChargePeriodEnd"]
STRING = [
    "BillingAccountId", "BillingAccountName", "BillingAccountType", "BillingCurrency", "ChargeCategory", "ChargeClass",
    "ChargeDescription", "ChargeFrequency", "ConsumedUnit", "InvoiceId", "InvoiceIssuerName", "PricingCategory",
    "PricingUnit", "ProviderName", "PublisherName", "ResourceId", "ResourceName", "ResourceType", "ServiceCategory",
    "ServiceName", "ServiceSubcategory", "SubAccountId", "SubAccountName", "SubAccountType",
]
NOT_NULL = [
    "BilledCost", "BillingAccountId", "BillingAccountName", "BillingCurrency", "BillingPeriodEnd", "BillingPeriodStart",
    "ChargeCategory", "ChargePeriodEnd", "ChargePeriodStart", "ContractedCost", "EffectiveCost", "InvoiceIssuerName",
    "ListCost", "ProviderName", "PublisherName", "ServiceCategory", "ServiceName", "ServiceSubcategory",
]
PRESENT = DECIMAL + DATETIME + STRING + ["Tags"]

# NumericFormat: integer, decimal or E notation; no sign for positives, no separators, no units.
NUMERIC = re.compile(r"-?(0|[1-9][0-9]*)(\.[0-9]+)?(E-?[0-9]+)?")
DATETIME_FORMAT = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z")  # DateTimeFormat
# ISO 4217 codes that are no national currency (precious metals, SDR, fund and test codes).
NOT_NATIONAL = {"XAG", "XAU", "XBA", "XBB", "XBC", "XBD", "XDR", "XPD", "XPT", "XSU", "XTS", "XUA", "XXX"}
# UnitFormat: <plural-units> or <singular-unit>-<plural-time-units>, capitalised.
UNIT = re.compile(r"[A-Z][A-Za-z]*(-(Seconds|Minutes|Hours|Days|Weeks|Months|Years))?")
CHARGE_CATEGORIES = {"Usage", "Purchase", "Tax", "Credit", "Adjustment"}
CHARGE_FREQUENCIES = {"One-Time", "Recurring", "Usage-Based"}
PRICING_CATEGORIES = {"Standard", "Committed", "Dynamic", "Other"}
# ServiceSubcategory -> its one parent ServiceCategory (the rows of the spec's table this export uses)
SUBCATEGORY_PARENT = {"Machine Learning": "AI and Machine Learning"}


def _decimal(value: str | None) -> Decimal | None:
    return None if value is None else Decimal(value)


def _is_decimal(value: str | None) -> bool:
    if value is None:
        return True
    try:
        Decimal(value)
    except InvalidOperation:
        return False
    return bool(NUMERIC.fullmatch(value))


def _key_value(value: str | None) -> bool:
    """KeyValueFormat: a JSON object, unique keys, values number/string/true/false/null only."""
    if value is None:
        return True
    pairs: list[tuple[str, object]] = []
    try:
        obj = json.loads(value, object_pairs_hook=lambda items: pairs.extend(items) or dict(items))
    except ValueError:
        return False
    return (isinstance(obj, dict) and len({k for k, _ in pairs}) == len(pairs)
            and all(v is None or isinstance(v, str | int | float | bool) for _, v in pairs))


def each(predicate: Callable[[Row], bool]) -> Callable[[list[Row]], list[str]]:
    """A row-wise rule: the x_LineId of every row that breaks it."""
    return lambda rows: [r["x_LineId"] or "?" for r in rows if not predicate(r)]


def columns(names: list[str], predicate: Callable[[str | None], bool]) -> Callable[[list[Row]], list[str]]:
    return each(lambda r: all(predicate(r[c]) for c in names))


def present(names: list[str]) -> Callable[[list[Row]], list[str]]:
    return lambda rows: [c for c in names if any(c not in r for r in rows)]


def _one_parent(rows: list[Row], a: str, b: str) -> list[str]:
    """Each value of column `a` has exactly one value of column `b`."""
    seen: dict[str | None, set[str | None]] = defaultdict(set)
    for r in rows:
        seen[r[a]].add(r[b])
    return [str(k) for k, v in seen.items() if len(v) != 1]


def _tags(r: Row) -> dict:
    return json.loads(r["Tags"]) if r["Tags"] else {}


def _correction(r: Row) -> bool:
    return r["x_Corrects"] is not None


def _unrelated_to_other_charges(r: Row) -> bool:
    """Credits and adjustments stand alone (no unit price, not computed from other rows)."""
    return r["ChargeCategory"] in {"Credit", "Adjustment"}


# (rule id, requirement, check): a check returns what breaks the rule ([] = conformant).
RULES: list[tuple[str, str, Callable[[list[Row]], list[str]]]] = [
    ("CostAndUsage-D-*", "every mandatory and claimed conditional/recommended column is present", present(PRESENT)),
    ("ColumnHandling", "custom columns carry the x_ prefix",
     lambda rows: sorted({c for r in rows for c in r if c not in PRESENT and not c.startswith("x_")})),
    ("*-C-001-M TypeDecimal / NumericFormat", "cost and quantity columns are decimals in NumericFormat",
     columns(DECIMAL, _is_decimal)),
    ("*-C-001-M TypeDateTime / DateTimeFormat", "date/time columns are ISO 8601 UTC YYYY-MM-DDTHH:mm:ssZ",
     columns(DATETIME, lambda v: v is None or bool(DATETIME_FORMAT.fullmatch(v)))),
    ("StringHandling", "no string column holds spaces only or padding",
     columns(STRING, lambda v: v is None or (v.strip() == v and v != ""))),
    ("*-C-00x-M NotNull", "the non-nullable columns are filled on every row", columns(NOT_NULL, lambda v: v is not None)),
    ("BillingCurrency-C-003-M", "BillingCurrency is a three-letter ISO 4217 code",
     each(lambda r: bool(re.fullmatch(r"[A-Z]{3}", r["BillingCurrency"] or "")))),
    ("BillingCurrency-C-006-M", "BillingCurrency is a national currency",
     each(lambda r: r["BillingCurrency"] not in NOT_NATIONAL)),
    ("ChargeCategory-C-003-M", "ChargeCategory is an allowed value", each(lambda r: r["ChargeCategory"] in CHARGE_CATEGORIES)),
    ("ChargeClass-C-005-C", "ChargeClass is \"Correction\" when not null",
     each(lambda r: r["ChargeClass"] in (None, "Correction"))),
    ("ChargeClass-C-003-C/-004-C", "ChargeClass is set exactly on corrections of a previously invoiced period",
     each(lambda r: (r["ChargeClass"] == "Correction") == _correction(r))),
    ("ChargeFrequency-C-003-M", "ChargeFrequency is an allowed value",
     each(lambda r: r["ChargeFrequency"] in CHARGE_FREQUENCIES)),
    ("ChargePeriodStart-C-004-M/ChargePeriodEnd-C-004-M", "a charge period is inclusive start < exclusive end",
     each(lambda r: r["ChargePeriodStart"] < r["ChargePeriodEnd"])),
    ("BillingPeriodStart-C-004-M/BillingPeriodEnd-C-004-M",
     "a billing period is one calendar month; charges of the period lie inside it (corrections: earlier periods)",
     each(lambda r: r["BillingPeriodStart"] == "2026-10-01T00:00:00Z" and r["BillingPeriodEnd"] == "2026-11-01T00:00:00Z"
          and (_correction(r) or r["BillingPeriodStart"] <= r["ChargePeriodStart"] < r["ChargePeriodEnd"] <= r["BillingPeriodEnd"]))),
    ("PricingQuantity-C-005-C", "PricingQuantity is not null on Usage/Purchase rows that are no correction",
     each(lambda r: r["ChargeCategory"] not in ("Usage", "Purchase") or r["ChargeClass"] or r["PricingQuantity"] is not None)),
    ("PricingQuantity-C-004-C", "PricingQuantity is null on Tax rows",
     each(lambda r: r["ChargeCategory"] != "Tax" or r["PricingQuantity"] is None)),
    ("PricingUnit-C-005-C/-006-C", "PricingUnit is null exactly when PricingQuantity is",
     each(lambda r: (r["PricingUnit"] is None) == (r["PricingQuantity"] is None))),
    ("PricingUnit-C-003-O", "PricingUnit follows UnitFormat", columns(["PricingUnit"], lambda v: v is None or bool(UNIT.fullmatch(v)))),
    ("ConsumedQuantity-C-004-C", "ConsumedQuantity is null when ChargeCategory is not Usage",
     each(lambda r: r["ChargeCategory"] == "Usage" or r["ConsumedQuantity"] is None)),
    ("ConsumedQuantity-C-006-C", "ConsumedQuantity is not null on Usage rows that are no correction",
     each(lambda r: r["ChargeCategory"] != "Usage" or r["ChargeClass"] or r["ConsumedQuantity"] is not None)),
    ("ConsumedUnit-C-005-C/-006-C", "ConsumedUnit is null exactly when ConsumedQuantity is",
     each(lambda r: (r["ConsumedUnit"] is None) == (r["ConsumedQuantity"] is None))),
    ("ConsumedUnit-C-003-O", "ConsumedUnit follows UnitFormat", columns(["ConsumedUnit"], lambda v: v is None or bool(UNIT.fullmatch(v)))),
    ("PricingCategory-C-004-C", "PricingCategory is not null on Usage/Purchase rows that are no correction",
     each(lambda r: r["ChargeCategory"] not in ("Usage", "Purchase") or r["ChargeClass"] or r["PricingCategory"] is not None)),
    ("PricingCategory-C-007-M", "PricingCategory is an allowed value",
     each(lambda r: r["PricingCategory"] in PRICING_CATEGORIES | {None})),
    ("ListCost-C-008-C/ContractedCost-C-008-C/EffectiveCost-C-010-C",
     "a charge unrelated to other charges (Credit, Adjustment) has List = Contracted = Effective = BilledCost",
     each(lambda r: not _unrelated_to_other_charges(r)
          or _decimal(r["ListCost"]) == _decimal(r["ContractedCost"]) == _decimal(r["EffectiveCost"]) == _decimal(r["BilledCost"]))),
    ("EffectiveCost (no commitment discounts)", "EffectiveCost = ContractedCost = BilledCost: nothing is amortised",
     each(lambda r: _decimal(r["EffectiveCost"]) == _decimal(r["ContractedCost"]) == _decimal(r["BilledCost"]))),
    ("ListCost (list >= contracted)", "ListCost is at least ContractedCost on a positive charge (discounts only lower it)",
     each(lambda r: _decimal(r["BilledCost"]) < 0 or _decimal(r["ListCost"]) >= _decimal(r["ContractedCost"]))),
    ("ServiceCategory-C-003-M", "ServiceCategory is an allowed value", each(lambda r: r["ServiceCategory"] == "AI and Machine Learning")),
    ("ServiceSubcategory-C-003-M/-004-M", "ServiceSubcategory is allowed and under its one parent ServiceCategory",
     each(lambda r: SUBCATEGORY_PARENT.get(r["ServiceSubcategory"]) == r["ServiceCategory"])),
    ("ServiceName-C-005-C", "a ServiceName has one ServiceCategory",
     lambda rows: _one_parent(rows, "ServiceName", "ServiceCategory")),
    ("ServiceName-C-008-C", "a ServiceName has one ServiceSubcategory",
     lambda rows: _one_parent(rows, "ServiceName", "ServiceSubcategory")),
    ("BillingAccountType-C-004-C/-005-C", "BillingAccountType is null exactly when BillingAccountId is",
     each(lambda r: (r["BillingAccountType"] is None) == (r["BillingAccountId"] is None))),
    ("SubAccountName-C-004-C/-005-C", "SubAccountName is null exactly when SubAccountId is",
     each(lambda r: (r["SubAccountName"] is None) == (r["SubAccountId"] is None))),
    ("SubAccountType-C-004-C/-005-C", "SubAccountType is null exactly when SubAccountId is",
     each(lambda r: (r["SubAccountType"] is None) == (r["SubAccountId"] is None))),
    ("ResourceType-C-004-C/-005-C", "ResourceType is null exactly when ResourceId is",
     each(lambda r: (r["ResourceType"] is None) == (r["ResourceId"] is None))),
    ("ResourceName-C-004-C", "ResourceName is null when ResourceId is",
     each(lambda r: r["ResourceId"] is not None or r["ResourceName"] is None)),
    ("InvoiceId-C-004-C/-005-C", "InvoiceId is null exactly on rows no invoice carries (platform balance, unallocated)",
     each(lambda r: (r["InvoiceId"] is None) == (r["SubAccountType"] == "Platform"))),
    ("InvoiceId-C-007-C", "an InvoiceId belongs to one BillingAccountId", lambda rows: _one_parent(
        [r for r in rows if r["InvoiceId"]], "InvoiceId", "BillingAccountId")),
    ("Tags-C-001-M", "Tags is KeyValueFormat: a JSON object of unique keys with scalar values",
     columns(["Tags"], _key_value)),
    ("Tags-C-012-M", "provider-defined tag keys carry the provider's prefix x_",
     each(lambda r: all(k.startswith(exports.TAG_PREFIX) for k in _tags(r)))),
    ("Tags-C-008-M", "no tag key without a value (valueless keys would need true)",
     each(lambda r: all(v not in ("", None) for v in _tags(r).values()))),
]

# Rules of the claimed columns that no row of this export can exercise, and why.
NOT_APPLICABLE = {
    "BilledCost-C-005-C": "ProviderName = InvoiceIssuerName: no third-party (marketplace) payments",
    "EffectiveCost-C-005-C": "no Purchase rows (no commitment discounts are sold)",
    "EffectiveCost-C-012-C/-013-C": "no CommitmentDiscountStatus column: commitment discounts unsupported",
    "ListCost-C-009-C/ContractedCost-C-009-C/PricingQuantity-C-009-C": "no unit price columns are claimed",
    "Tags-C-015-C/-016-C/-017-M": "no user-defined tag scheme: users cannot tag charges",
    "PricingQuantity-C-004-C/PricingCategory-C-003-C": "no Tax rows (exercised vacuously above)",
}


def _focus_rows(data: bytes) -> list[Row]:
    """CSV rows with empty cells as null (the export writes null as an empty, unquoted cell)."""
    return [{k: (v if v != "" else None) for k, v in r.items()} for r in csv.DictReader(io.StringIO(data.decode("utf-8")))]


@pytest.fixture
def rated_month(session):
    """A closed September, then October rated: a whole month of the worked example plus unallocated
    use, its SLA breaches, and a correction of a September reserved fee."""
    v = store_policy(session)
    fill_month(session, "2026-09", v.id)
    sept = periods.close(session=session, period="2026-09", actor="fin")
    fee = next(l for l in load_view(session=session, period=sept).lines if l.kind == LineKind.RESERVED_FEE)
    periods.correct(session=session, period="2026-10", line_id=fee.line_id, amount="-3.50",
                    reason="reservation started late", actor="fin")
    fill_month(session, "2026-10", v.id, usage=[*EXAMPLE_USAGE, ("unallocated", "unallocated", False, 300)])
    return periods.rate(session=session, period="2026-10", actor="fin")


def test_focus_export_meets_every_applicable_focus_1_2_rule(session, rated_month):
    rows = _focus_rows(exports.render(session=session, period=rated_month, fmt="focus"))
    kinds = {_tags(r)["x_kind"] for r in rows}
    # the month exercises every row family the rules distinguish
    assert {"Usage", "Credit", "Adjustment"} <= {r["ChargeCategory"] for r in rows}
    assert {LineKind.UNALLOCATED, LineKind.IDLE, LineKind.SLA_CREDIT, LineKind.USAGE_DARK} <= kinds
    assert any(r["ChargeClass"] == "Correction" for r in rows)
    broken = {rule: found for rule, _, check in RULES if (found := check(rows))}
    assert broken == {}

    # BilledCost-C-007-M: the BilledCost of an InvoiceId adds up to that invoice's total.
    view = load_view(session=session, period=rated_month)
    billed: dict[str, Decimal] = defaultdict(Decimal)
    for r in rows:
        if r["InvoiceId"]:
            billed[r["InvoiceId"]] += Decimal(r["BilledCost"])
    assert billed == {f"2026-10/{t}": tenant_invoice(view, t)["total"] for t in view.tenants}
    platform = [r for r in rows if r["SubAccountId"] == "platform"]
    assert platform and all(r["InvoiceId"] is None for r in platform)
    assert any(_tags(r)["x_kind"] == LineKind.UNALLOCATED for r in platform)


@pytest.mark.parametrize("rule", [rule for rule, _, _ in RULES])
def test_each_rule_can_fail(rule):
    """A rule that no broken row trips would prove nothing: break a conformant row per rule."""
    check = next(c for r, _, c in RULES if r == rule)
    good: Row = {c: None for c in PRESENT} | {"x_LineId": "L1", "x_Corrects": None}
    good |= {
        "BilledCost": "1.82", "ContractedCost": "1.82", "EffectiveCost": "1.82", "ListCost": "1.82",
        "PricingQuantity": "1.400000", "ConsumedQuantity": "1.400000", "PricingUnit": "GPU-Hours",
        "ConsumedUnit": "GPU-Hours", "BillingPeriodStart": "2026-10-01T00:00:00Z",
        "BillingPeriodEnd": "2026-11-01T00:00:00Z", "ChargePeriodStart": "2026-10-01T00:00:00Z",
        "ChargePeriodEnd": "2026-10-01T02:00:00Z", "BillingAccountId": "research", "BillingAccountName": "research",
        "BillingAccountType": "Department", "BillingCurrency": "USD", "ChargeCategory": "Usage",
        "ChargeDescription": "GPU use", "ChargeFrequency": "Usage-Based", "InvoiceId": "2026-10/vision",
        "InvoiceIssuerName": "GPU Platform", "ProviderName": "GPU Platform", "PublisherName": "GPU Platform",
        "PricingCategory": "Standard", "ResourceId": "mixed-a100", "ResourceName": "mixed-a100",
        "ResourceType": "GPU pool", "ServiceCategory": "AI and Machine Learning", "ServiceName": "GPU Co-location",
        "ServiceSubcategory": "Machine Learning", "SubAccountId": "vision", "SubAccountName": "vision",
        "SubAccountType": "Tenant", "Tags": '{"x_kind":"usage_busy"}',
    }
    assert check([good]) == []
    assert check([good, BREAKS[rule](dict(good))]) != [], rule


def _set(**values):
    return lambda r: r | values


BREAKS: dict[str, Callable[[Row], Row]] = {
    "CostAndUsage-D-*": lambda r: {k: v for k, v in r.items() if k != "ListCost"},
    "ColumnHandling": _set(LineNote="x"),
    "*-C-001-M TypeDecimal / NumericFormat": _set(BilledCost="1,82"),
    "*-C-001-M TypeDateTime / DateTimeFormat": _set(ChargePeriodEnd="2026-10-01 02:00:00"),
    "StringHandling": _set(ServiceName=" GPU"),
    "*-C-00x-M NotNull": _set(ProviderName=None),
    "BillingCurrency-C-003-M": _set(BillingCurrency="usd"),
    "BillingCurrency-C-006-M": _set(BillingCurrency="XAU"),
    "ChargeCategory-C-003-M": _set(ChargeCategory="Fee"),
    "ChargeClass-C-005-C": _set(ChargeClass="Refund"),
    "ChargeClass-C-003-C/-004-C": _set(x_Corrects="L0"),
    "ChargeFrequency-C-003-M": _set(ChargeFrequency="Hourly"),
    "ChargePeriodStart-C-004-M/ChargePeriodEnd-C-004-M": _set(ChargePeriodEnd="2026-10-01T00:00:00Z"),
    "BillingPeriodStart-C-004-M/BillingPeriodEnd-C-004-M": _set(ChargePeriodStart="2026-09-30T23:00:00Z"),
    "PricingQuantity-C-005-C": _set(PricingQuantity=None, PricingUnit=None),
    "PricingQuantity-C-004-C": _set(ChargeCategory="Tax"),
    "PricingUnit-C-005-C/-006-C": _set(PricingUnit=None),
    "PricingUnit-C-003-O": _set(PricingUnit="gpu hours"),
    "ConsumedQuantity-C-004-C": _set(ChargeCategory="Adjustment"),
    "ConsumedQuantity-C-006-C": _set(ConsumedQuantity=None, ConsumedUnit=None),
    "ConsumedUnit-C-005-C/-006-C": _set(ConsumedUnit=None),
    "ConsumedUnit-C-003-O": _set(ConsumedUnit="GPU-hours"),
    "PricingCategory-C-004-C": _set(PricingCategory=None),
    "PricingCategory-C-007-M": _set(PricingCategory="Spot"),
    "ListCost-C-008-C/ContractedCost-C-008-C/EffectiveCost-C-010-C": _set(ChargeCategory="Credit", ListCost="2.00"),
    "EffectiveCost (no commitment discounts)": _set(EffectiveCost="1.50"),
    "ListCost (list >= contracted)": _set(ListCost="1.00"),
    "ServiceCategory-C-003-M": _set(ServiceCategory="GPU"),
    "ServiceSubcategory-C-003-M/-004-M": _set(ServiceSubcategory="Virtual Machines"),
    "ServiceName-C-005-C": _set(ServiceCategory="Compute", x_LineId="L2"),
    "ServiceName-C-008-C": _set(ServiceSubcategory="AI Platforms"),
    "BillingAccountType-C-004-C/-005-C": _set(BillingAccountType=None),
    "SubAccountName-C-004-C/-005-C": _set(SubAccountName=None),
    "SubAccountType-C-004-C/-005-C": _set(SubAccountId=None, SubAccountName=None),
    "ResourceType-C-004-C/-005-C": _set(ResourceType=None),
    "ResourceName-C-004-C": _set(ResourceId=None, ResourceType=None),
    "InvoiceId-C-004-C/-005-C": _set(SubAccountType="Platform"),
    "InvoiceId-C-007-C": _set(BillingAccountId="other"),
    "Tags-C-001-M": _set(Tags='{"x_kind":["a"]}'),
    "Tags-C-012-M": _set(Tags='{"kind":"usage_busy"}'),
    "Tags-C-008-M": _set(Tags='{"x_kind":""}'),
}
