"""Kubernetes resource quantities ("500m", "64Gi", "1e3") as exact fractions.

The grammar is the one documented on ``resource.Quantity`` in k8s.io/apimachinery
(pkg/api/resource/quantity.go), with the suffix table of pkg/api/resource/suffix.go::

    <quantity>        ::= <signedNumber><suffix>
    <signedNumber>    ::= <number> | <sign><number>
    <sign>            ::= "+" | "-"
    <number>          ::= <digits> | <digits>.<digits> | <digits>. | .<digits>
    <suffix>          ::= <binarySI> | <decimalExponent> | <decimalSI>
    <binarySI>        ::= Ki | Mi | Gi | Ti | Pi | Ei
    <decimalSI>       ::= n | u | m | "" | k | M | G | T | P | E
    <decimalExponent> ::= "e" <signedInteger> | "E" <signedInteger>

Where the documentation and the Go scanner disagree, this module takes the stricter reading:

- The exponent is a signed *integer* (``1e3``, ``1E-3``): the Go scanner refuses ``1e1.5`` although the
  documented grammar says ``"e" <signedNumber>``.
- A number needs at least one digit: the Go scanner reads ``"."``, ``"+"``, ``"e3"`` and ``"Mi"`` as zero,
  the documented grammar (and this module) refuses them.
- Values are exact: Kubernetes rounds anything finer than 1n up to 1n and caps binarySI values at 2^63-1;
  ``parse_quantity`` returns the exact value written. ``millicores`` rounds up as ``Quantity.MilliValue`` does.
- Exponents beyond +-``MAX_EXPONENT`` are refused (no real quantity needs them, and ``10**huge`` is a
  denial of service); Go silently wraps exponents outside int32.

Whitespace is never trimmed (Kubernetes refuses ``" 1"`` and ``"1 "``), and ``1K`` is invalid: the decimal
kilo is lower-case ``k``, the binary one ``Ki``.

Pure Python; no Django, no I/O.
"""

from __future__ import annotations

import functools
import math
import re
from decimal import Decimal
from fractions import Fraction

__all__ = [
    "BINARY_SI",
    "DECIMAL_SI",
    "MAX_EXPONENT",
    "InvalidQuantity",
    "format_cpu",
    "format_memory",
    "mebibytes",
    "millicores",
    "parse_count",
    "parse_quantity",
]

#: binarySI suffixes and the power of two each stands for.
BINARY_SI: dict[str, int] = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
#: decimalSI suffixes (including the empty one) and the power of ten each stands for.
DECIMAL_SI: dict[str, Fraction] = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
#: The largest exponent magnitude accepted in the ``1e3`` form.
MAX_EXPONENT = 1000

_EXAMPLES = "'8', '500m', '1.5', '64Gi', '16G', '100u', '1e3', '-1Gi'"
_QUANTITY = re.compile(
    r"(?P<sign>[+-]?)"
    r"(?P<whole>[0-9]*)(?:(?P<dot>\.)(?P<frac>[0-9]*))?"
    r"(?:(?P<binary>[KMGTPE]i)|[eE](?P<exponent>[+-]?[0-9]+)|(?P<decimal>[numkMGTPE]?))"
)
_MEBI = 2**20


class InvalidQuantity(ValueError):
    """A value that is not a Kubernetes resource quantity; the message says why and shows valid ones."""

    def __init__(self, value: object, why: str):
        self.value = value
        self.why = why
        super().__init__(f"{value!r} is not a Kubernetes quantity: {why}. Valid quantities look like {_EXAMPLES}.")


def parse_quantity(value: str | int | float | Fraction | Decimal) -> Fraction:
    """The exact value of a Kubernetes quantity, in base units (cores, bytes, devices).

    Accepts a quantity string, an ``int``, a ``Fraction`` or a finite ``Decimal`` (exact already), and a finite
    ``float``, read through its shortest ``repr`` so that YAML's ``cpu: 0.1`` means 1/10, not the binary
    approximation. ``bool`` and ``None`` are refused (``True`` is not one core). Raises ``InvalidQuantity``.
    """
    if isinstance(value, str):
        return _parse_text(value)
    if value is None:
        raise InvalidQuantity(value, "a missing value is not a quantity (pass 0 if zero is meant)")
    if isinstance(value, bool):
        raise InvalidQuantity(value, "a bool is not a quantity")
    if isinstance(value, int | Fraction):
        return Fraction(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidQuantity(value, "it is not a finite number")
        return _parse_text(repr(value))
    if isinstance(value, Decimal):
        if not value.is_finite():
            raise InvalidQuantity(value, "it is not a finite number")
        return Fraction(value)
    raise InvalidQuantity(value, f"a {type(value).__name__} is not a quantity")


@functools.lru_cache(maxsize=4096)
def _parse_text(text: str) -> Fraction:
    if not text:
        raise InvalidQuantity(text, "it is empty")
    if text != text.strip():
        raise InvalidQuantity(text, "it has surrounding whitespace")
    match = _QUANTITY.fullmatch(text)
    if match is None or not (match["whole"] or match["frac"]):
        raise InvalidQuantity(text, _diagnose(text))
    digits = match["whole"] + (match["frac"] or "")
    try:
        number = Fraction(int(digits), 10 ** len(match["frac"] or ""))
    except ValueError as exc:  # more digits than int() converts (sys.int_info.str_digits_check_threshold)
        raise InvalidQuantity(text, "it has too many digits") from exc
    if match["sign"] == "-":
        number = -number
    if match["binary"]:
        return number * BINARY_SI[match["binary"]]
    if match["exponent"] is not None:
        exponent = int(match["exponent"])
        if abs(exponent) > MAX_EXPONENT:
            raise InvalidQuantity(text, f"its exponent is beyond +-{MAX_EXPONENT}")
        return number * Fraction(10) ** exponent
    return number * DECIMAL_SI[match["decimal"]]


def _diagnose(text: str) -> str:
    """Why ``text`` does not match the grammar, as precisely as is cheap to say."""
    head = re.match(r"[+-]?[0-9]*(?:\.[0-9]*)?", text)
    number, suffix = (head.group(0), text[head.end() :]) if head else ("", text)
    if not re.search(r"[0-9]", number):
        return "it does not start with a number (digits, with an optional sign and decimal point)"
    if suffix.startswith((".", "+", "-")):
        return "the number is malformed"
    if suffix[:1] in ("e", "E"):
        return "an exponent is 'e' or 'E' followed by a whole number, as in '1e3' or '5E-3'"
    if suffix.lower() in ("k", "ki"):
        return f"the suffix {suffix!r} does not exist: use 'k' for 1000 or 'Ki' for 1024"
    return (
        f"the suffix {suffix!r} is not one of n u m k M G T P E (powers of 1000), Ki Mi Gi Ti Pi Ei "
        "(powers of 1024) or an exponent"
    )


def parse_count(value: str | int | float | Fraction | Decimal) -> int:
    """A whole, non-negative number of devices: an extended resource such as ``nvidia.com/gpu``.

    Kubernetes refuses fractional extended resources ("must be an integer"); ``"1000m"`` is 1, ``"500m"`` is an
    error. Raises ``InvalidQuantity``.
    """
    quantity = parse_quantity(value)
    if quantity.denominator != 1:
        raise InvalidQuantity(value, "devices (such as GPUs) are counted in whole numbers")
    if quantity < 0:
        raise InvalidQuantity(value, "a device count cannot be negative")
    return int(quantity)


def millicores(value: str | int | float | Fraction | Decimal) -> int:
    """CPU in millicores, rounded up like ``Quantity.MilliValue`` ("0.5" -> 500, "0.1m" -> 1)."""
    return math.ceil(parse_quantity(value) * 1000)


def mebibytes(value: str | int | float | Fraction | Decimal) -> int:
    """Memory in whole MiB, rounded down ("64Gi" -> 65536, "1500Ki" -> 1); negatives round towards zero."""
    return int(parse_quantity(value) / _MEBI)


def format_cpu(cores: Fraction | int) -> str:
    """CPU as the kubelet writes it: whole cores as "16", otherwise millicores ("1500m"), rounded up."""
    cores = Fraction(cores)
    return str(int(cores)) if cores.denominator == 1 else f"{math.ceil(cores * 1000)}m"


def format_memory(num_bytes: Fraction | int) -> str:
    """Memory as the kubelet writes node capacity: whole KiB, rounded down ("67108864Ki")."""
    return f"{math.floor(Fraction(num_bytes)) // 1024}Ki"
