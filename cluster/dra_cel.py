"""CEL device selectors as Kubernetes evaluates them for Dynamic Resource Allocation.

A DeviceClass or a claim's request selects devices with CEL expressions over one variable, ``device``:
``device.driver`` (a string), ``device.attributes[<domain>].<name>`` and ``device.capacity[<domain>].<name>``
(k8s.io/dynamic-resource-allocation/cel/compile.go). An attribute's domain is the part of its qualified name
before the slash; an unqualified name in a ResourceSlice belongs to the driver's domain. Looking up a domain the
device has nothing in gives an empty map, so ``'x' in device.attributes['other.example.com']`` is false, while
reading a missing name is a runtime error. Capacities are quantities and version attributes semantic versions,
with Kubernetes' CEL libraries for them: ``quantity('40Gi')``, ``isGreaterThan``, ``isLessThan``,
``compareTo``, ``add``, ``sub``, ``sign``, ``isInteger``, ``asInteger``, ``asApproximateFloat``;
``semver('1.2.3')``, ``major``, ``minor``, ``patch`` (k8s.io/apiserver/pkg/cel/library quantity.go, semver.go).

The CEL language itself is cel-python (``celpy``, pure Python, a maintained implementation of the CEL spec):
it lets a program's functions take and return Python objects, which the quantity and semver types need, and it
dispatches a method call ``x.f(y)`` to the function ``f(x, y)``. Quantities are parsed by ``vocab.quantity``.
A selector that does not compile, or fails at run time, raises ``CelError`` with the expression and the reason,
as the scheduler reports it.
"""

from __future__ import annotations

import functools
import re
from fractions import Fraction
from typing import Any

import celpy
from celpy import celtypes

from vocab.quantity import InvalidQuantity, parse_quantity


class CelError(ValueError):
    """A CEL expression that does not compile or cannot be evaluated; the message says which and why."""


class Quantity:
    """A Kubernetes quantity in CEL (k8s.io/apiserver/pkg/cel/library/quantity.go): exact, compared by value."""

    def __init__(self, value: Fraction, text: str | None = None) -> None:
        self.value = value
        self.text = text if text is not None else _format(value)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Quantity) and self.value == other.value

    def __hash__(self) -> int:
        return hash(self.value)

    def __repr__(self) -> str:
        return f"quantity({self.text!r})"


class Semver:
    """A semantic version in CEL (k8s.io/apiserver/pkg/cel/library/semver.go): major.minor.patch compared in order;
    a pre-release sorts before its release."""

    _PATTERN = re.compile(r"(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-([0-9A-Za-z.-]+))?(?:\+[0-9A-Za-z.-]+)?")

    def __init__(self, text: str) -> None:
        match = self._PATTERN.fullmatch(text)
        if match is None:
            raise CelError(f"{text!r} is not a semantic version (major.minor.patch, e.g. '1.2.3')")
        self.text = text
        self.parts = (int(match[1]), int(match[2]), int(match[3]))
        self.pre = match[4] or ""

    def key(self) -> tuple[Any, ...]:
        return (*self.parts, 0 if self.pre else 1, self.pre)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Semver) and self.key() == other.key()

    def __hash__(self) -> int:
        return hash(self.key())

    def __repr__(self) -> str:
        return f"semver({self.text!r})"


def _format(value: Fraction) -> str:
    return str(value.numerator) if value.denominator == 1 else str(float(value))


class _Domains(celtypes.MapType):
    """``device.attributes`` / ``device.capacity``: a domain the device has nothing in reads as an empty map."""

    def __getitem__(self, key: Any) -> Any:
        if not super().__contains__(key):
            return celtypes.MapType({})
        return super().__getitem__(key)


def _quantity(text: Any) -> Quantity:
    try:
        return Quantity(parse_quantity(str(text)), str(text))
    except InvalidQuantity as error:
        raise CelError(f"quantity({str(text)!r}): {error.why}") from None


def _order(left: Any, right: Any) -> int:
    if isinstance(left, Quantity) and isinstance(right, Quantity):
        a, b = left.value, right.value
    elif isinstance(left, Semver) and isinstance(right, Semver):
        a, b = left.key(), right.key()
    else:
        raise CelError(f"no such overload: {type(left).__name__}.compareTo({type(right).__name__})")
    return (a > b) - (a < b)


def _is_greater_than(left: Any, right: Any) -> celtypes.BoolType:
    return celtypes.BoolType(_order(left, right) > 0)


def _is_less_than(left: Any, right: Any) -> celtypes.BoolType:
    return celtypes.BoolType(_order(left, right) < 0)


def _compare_to(left: Any, right: Any) -> celtypes.IntType:
    return celtypes.IntType(_order(left, right))


def _add(left: Quantity, right: Any) -> Quantity:
    other = right.value if isinstance(right, Quantity) else Fraction(int(right))
    return Quantity(left.value + other)


def _sub(left: Quantity, right: Any) -> Quantity:
    other = right.value if isinstance(right, Quantity) else Fraction(int(right))
    return Quantity(left.value - other)


def _sign(value: Quantity) -> celtypes.IntType:
    return celtypes.IntType((value.value > 0) - (value.value < 0))


def _is_integer(value: Quantity) -> celtypes.BoolType:
    return celtypes.BoolType(value.value.denominator == 1 and abs(value.value) < 2**63)


def _as_integer(value: Quantity) -> celtypes.IntType:
    if not _is_integer(value):
        raise CelError(f"cannot convert value to integer: {value.text} is not an integer or is out of range")
    return celtypes.IntType(int(value.value))


def _as_approximate_float(value: Quantity) -> celtypes.DoubleType:
    return celtypes.DoubleType(float(value.value))


def _is_quantity(text: Any) -> celtypes.BoolType:
    try:
        parse_quantity(str(text))
    except InvalidQuantity:
        return celtypes.BoolType(False)
    return celtypes.BoolType(True)


def _semver(text: Any) -> Semver:
    return Semver(str(text))


def _is_semver(text: Any) -> celtypes.BoolType:
    return celtypes.BoolType(Semver._PATTERN.fullmatch(str(text)) is not None)


FUNCTIONS = {
    "quantity": _quantity,
    "isQuantity": _is_quantity,
    "isGreaterThan": _is_greater_than,
    "isLessThan": _is_less_than,
    "compareTo": _compare_to,
    "add": _add,
    "sub": _sub,
    "sign": _sign,
    "isInteger": _is_integer,
    "asInteger": _as_integer,
    "asApproximateFloat": _as_approximate_float,
    "semver": _semver,
    "isSemver": _is_semver,
    "major": lambda version: celtypes.IntType(version.parts[0]),
    "minor": lambda version: celtypes.IntType(version.parts[1]),
    "patch": lambda version: celtypes.IntType(version.parts[2]),
}

_ENVIRONMENT = celpy.Environment()


@functools.lru_cache(maxsize=1024)
def compile_selector(expression: str) -> Any:
    """The compiled program of a selector; ``CelError`` when it does not parse."""
    if not expression.strip():
        raise CelError("the CEL expression is empty")
    try:
        return _ENVIRONMENT.program(_ENVIRONMENT.compile(expression), functions=FUNCTIONS)
    except celpy.CELParseError as error:
        raise CelError(f"compilation failed: {error}") from None


def compile_problem(expression: str) -> str | None:
    """Why an expression does not compile, or None (what the API server checks when a claim is created)."""
    try:
        compile_selector(expression)
    except CelError as error:
        return str(error)
    return None


def _attribute_value(value: dict[str, Any]) -> Any:
    """A ResourceSlice DeviceAttribute ({"string": ...}, {"int": ...}, {"bool": ...}, {"version": ...}) in CEL."""
    if "string" in value:
        return celtypes.StringType(value["string"])
    if "bool" in value:
        return celtypes.BoolType(bool(value["bool"]))
    if "int" in value:
        return celtypes.IntType(int(value["int"]))
    if "version" in value:
        return Semver(str(value["version"]))
    for plural, convert in (("strings", celtypes.StringType), ("ints", celtypes.IntType), ("bools", celtypes.BoolType)):
        if plural in value:
            return celtypes.ListType([convert(item) for item in value[plural]])
    if "versions" in value:
        return celtypes.ListType([Semver(str(item)) for item in value["versions"]])
    raise CelError(f"attribute value {value!r} has no known type")


def _by_domain(driver: str, items: dict[str, Any], convert) -> _Domains:
    domains: dict[str, dict[Any, Any]] = {}
    for qualified, value in items.items():
        domain, _, name = qualified.rpartition("/")
        domains.setdefault(domain or driver, {})[celtypes.StringType(name)] = convert(value)
    return _Domains({celtypes.StringType(d): celtypes.MapType(names) for d, names in domains.items()})


def device_variable(driver: str, device: dict[str, Any]) -> celtypes.MapType:
    """The ``device`` variable for one device of a ResourceSlice of ``driver``."""
    return celtypes.MapType(
        {
            celtypes.StringType("driver"): celtypes.StringType(driver),
            celtypes.StringType("attributes"): _by_domain(driver, device.get("attributes") or {}, _attribute_value),
            celtypes.StringType("capacity"): _by_domain(
                driver, device.get("capacity") or {}, lambda c: Quantity(parse_quantity(str(c["value"])), c["value"])
            ),
            celtypes.StringType("allowMultipleAllocations"): celtypes.BoolType(
                bool(device.get("allowMultipleAllocations"))
            ),
        }
    )


def selector_matches(expression: str, variable: celtypes.MapType) -> bool:
    """Whether the device (``device_variable``) satisfies the selector; ``CelError`` when the selector fails."""
    program = compile_selector(expression)
    try:
        result = program.evaluate({"device": variable})
    except CelError:
        raise
    except Exception as error:  # celpy raises CELEvalError and, from a function, whatever it raised
        raise CelError(f"CEL runtime error: {_reason(error)}") from None
    if isinstance(result, Exception):
        raise CelError(f"CEL runtime error: {_reason(result)}")
    if not isinstance(result, celtypes.BoolType | bool):
        raise CelError(f"the expression must return a bool, not {type(result).__name__}")
    return bool(result)


def _reason(error: BaseException) -> str:
    args = getattr(error, "args", ())
    if args and isinstance(args[0], str):
        detail = args[-1] if len(args) > 2 and isinstance(args[-1], tuple) and args[-1] else None
        return f"{args[0]} {detail[0]!s}" if detail else args[0]
    return str(error)
