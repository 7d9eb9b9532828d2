"""Bounds on what a request may carry, so that a value the database, the calendar or Python cannot hold is a 400
naming the field instead of a 500 (issue 16, finding 4): ids are ASCII digits within a 64-bit integer, dates
fall within years 1900–9998 in UTC, pages within ``MAX_LIMIT`` rows, JSON within ``MAX_JSON_DEPTH`` levels, and a
request body within ``DATA_UPLOAD_MAX_MEMORY_SIZE`` (413, naming the limit).

Lists' filtersets (gpus/, jobs/) use ``IdFilter`` and ``DateTimeBoundFilter``; settings name
``BoundedJSONParser`` and ``BoundedLimitOffsetPagination`` as the API's defaults; ``routers.IdRouter`` keeps a
non-numeric id out of every detail URL (404)."""

from __future__ import annotations

import datetime as dt
import json
import re

import django_filters
from django import forms
from django.conf import settings
from django.core.exceptions import ValidationError as DjangoValidationError
from rest_framework import exceptions, parsers, status
from rest_framework.exceptions import ValidationError
from rest_framework.pagination import LimitOffsetPagination

#: The widest integer the database stores (a BigAutoField primary key).
MAX_ID = 2**63 - 1
#: The earliest and latest instants a date filter or range takes (UTC): far inside what Python and the
#: databases hold, far outside any job's life.
EARLIEST = dt.datetime(1900, 1, 1, tzinfo=dt.UTC)
LATEST = dt.datetime(9998, 12, 31, tzinfo=dt.UTC)
MAX_LIMIT = 1000
MAX_OFFSET = 10**9
MAX_JSON_DEPTH = 64


def is_id(text: str) -> bool:
    """``text`` is an id the database can hold: ASCII digits, 1 … MAX_ID."""
    return bool(re.fullmatch(r"[0-9]{1,19}", text)) and 0 < int(text) <= MAX_ID


def whole_number(text: str, high: int = MAX_ID) -> int | None:
    """``text`` as a number when it is ASCII digits from 0 to ``high``, else None. Not ``str.isdigit()``: it takes
    "²" and other Unicode digits, which ``int()`` then refuses."""
    if not re.fullmatch(r"[0-9]{1,19}", text) or int(text) > high:
        return None
    return int(text)


class IdField(forms.IntegerField):
    def __init__(self, *args, **kwargs):
        kwargs.setdefault("min_value", 1)
        kwargs.setdefault("max_value", MAX_ID)
        super().__init__(*args, **kwargs)

    def to_python(self, value):
        if value not in self.empty_values and not re.fullmatch(r"\s*[0-9]+\s*", str(value)):
            raise DjangoValidationError("Give an id: a whole number in ASCII digits (e.g. 42).", code="invalid")
        return super().to_python(value)


class IdFilter(django_filters.NumberFilter):
    """An id filter (``team_id``, ``node_id``…): a whole number the database can hold, else a 400 naming it."""

    field_class = IdField

    def get_max_validator(self):
        return None


def check_instant(value: dt.datetime | dt.date | None):
    """None or ``value`` when it lies between EARLIEST and LATEST (a naive value is read as UTC). A value with an
    offset comes back as the same instant in UTC: Python takes offsets up to ±24 h, PostgreSQL only up to ±15:59,
    so "…-21:36" would reach the database as an error instead of a filter."""
    if value is None:
        return value
    moment = value if isinstance(value, dt.datetime) else dt.datetime.combine(value, dt.time())
    try:
        utc = moment.astimezone(dt.UTC) if moment.tzinfo else moment.replace(tzinfo=dt.UTC)
    except (OverflowError, ValueError):
        utc = None
    if utc is None or not EARLIEST <= utc <= LATEST:
        raise DjangoValidationError(
            f"Give a date between {EARLIEST:%Y-%m-%d} and {LATEST:%Y-%m-%d} (UTC).", code="out_of_range"
        )
    return utc if isinstance(value, dt.datetime) and value.tzinfo else value


class BoundedIsoDateTimeField(django_filters.fields.IsoDateTimeField):
    def to_python(self, value):
        return check_instant(super().to_python(value))


class DateTimeBoundFilter(django_filters.IsoDateTimeFilter):
    """An ISO 8601 instant within EARLIEST … LATEST, else a 400 naming the parameter."""

    field_class = BoundedIsoDateTimeField


class BoundedDateField(forms.DateField):
    def to_python(self, value):
        return check_instant(super().to_python(value))


class BoundedLimitOffsetPagination(LimitOffsetPagination):
    """``limit`` 1 … MAX_LIMIT and ``offset`` 0 … MAX_OFFSET in ASCII digits; anything else, an empty value
    (``?offset=``) included, is a 400 naming it (the stock class ignored a bad value and passed a huge one to the
    database). Left out, each takes its default."""

    max_limit = MAX_LIMIT

    def _read(self, request, name: str, low: int, high: int, default):
        raw = request.query_params.get(name)
        if raw is None:
            return default
        if not re.fullmatch(r"[0-9]{1,19}", raw) or not low <= int(raw) <= high:
            raise ValidationError({name: [f"Give a whole number from {low} to {high} (ASCII digits)."]})
        return int(raw)

    def get_limit(self, request):
        return self._read(request, self.limit_query_param, 1, MAX_LIMIT, self.default_limit)

    def get_offset(self, request):
        return self._read(request, self.offset_query_param, 0, MAX_OFFSET, 0)


class RequestTooLarge(exceptions.APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_code = "request_too_large"


def body_limit() -> int:
    return settings.DATA_UPLOAD_MAX_MEMORY_SIZE


def depth(value) -> int:
    """How deeply ``value`` nests lists and objects (iteratively: no recursion on hostile input)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, level)
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, level + 1) for child in children)
    return deepest


class BoundedJSONParser(parsers.JSONParser):
    """The API's JSON parser: a body over DATA_UPLOAD_MAX_MEMORY_SIZE is a 413 that says the limit (read no
    further than the limit), and JSON nested deeper than MAX_JSON_DEPTH a 400 that says so."""

    def parse(self, stream, media_type=None, parser_context=None):
        limit = body_limit()
        request = (parser_context or {}).get("request")
        declared = request.META.get("CONTENT_LENGTH") if request is not None else None
        megabytes = f"{limit / 1024 / 1024:g} MB"
        if declared and declared.isdigit() and int(declared) > limit:
            raise RequestTooLarge(f"The request body is over the API's limit of {megabytes} ({limit} bytes).")
        raw = stream.read(limit + 1) if stream is not None else b""
        if len(raw) > limit:
            raise RequestTooLarge(f"The request body is over the API's limit of {megabytes} ({limit} bytes).")
        encoding = (parser_context or {}).get("encoding", settings.DEFAULT_CHARSET)
        try:
            data = json.loads(raw.decode(encoding), parse_constant=_no_constant)
        except RecursionError as exc:
            raise exceptions.ParseError(f"JSON nested deeper than {MAX_JSON_DEPTH} levels; flatten it.") from exc
        except ValueError as exc:
            raise exceptions.ParseError(f"JSON parse error - {exc}") from exc
        if depth(data) > MAX_JSON_DEPTH:
            raise exceptions.ParseError(f"JSON nested deeper than {MAX_JSON_DEPTH} levels; flatten it.")
        return data


def _no_constant(name: str):
    raise ValueError(f"{name} is not valid JSON")
