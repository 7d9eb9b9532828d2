"""vocab.quantity against the resource.Quantity grammar of k8s.io/apimachinery."""

import re
from decimal import Decimal
from fractions import Fraction

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from vocab.quantity import (
    BINARY_SI,
    DECIMAL_SI,
    MAX_EXPONENT,
    InvalidQuantity,
    format_cpu,
    format_memory,
    mebibytes,
    millicores,
    parse_count,
    parse_quantity,
)

SUFFIX_VALUES: dict[str, Fraction] = {**DECIMAL_SI, **{k: Fraction(v) for k, v in BINARY_SI.items()}}

digits = st.text(alphabet="0123456789", min_size=1, max_size=12)
signs = st.sampled_from(["", "+", "-"])
suffixes = st.sampled_from(sorted(SUFFIX_VALUES))
exponents = st.integers(min_value=-40, max_value=40)


@st.composite
def numbers(draw) -> tuple[str, Fraction]:
    """A <number> in one of its four forms, and its value."""
    form = draw(st.sampled_from(["digits", "digits.digits", "digits.", ".digits"]))
    whole = draw(digits) if form != ".digits" else ""
    frac = draw(digits) if form in ("digits.digits", ".digits") else ""
    text = {"digits": whole, "digits.digits": f"{whole}.{frac}", "digits.": f"{whole}.", ".digits": f".{frac}"}[form]
    return text, Fraction(int(whole + frac), 10 ** len(frac))


@st.composite
def quantities(draw) -> tuple[str, Fraction]:
    """A valid quantity string (any sign, number form and suffix) and its exact value."""
    sign = draw(signs)
    number, value = draw(numbers())
    if sign == "-":
        value = -value
    if draw(st.booleans()):
        marker, exp_sign, exponent = draw(st.sampled_from("eE")), draw(signs), draw(st.integers(0, 40))
        signed = -exponent if exp_sign == "-" else exponent
        return f"{sign}{number}{marker}{exp_sign}{exponent}", value * Fraction(10) ** signed
    suffix = draw(suffixes)
    return f"{sign}{number}{suffix}", value * SUFFIX_VALUES[suffix]


# -- known values ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("0", 0),
        ("8", 8),
        ("1Ki", 1024),
        ("1Mi", 2**20),
        ("64Gi", 64 * 2**30),
        ("4Gi", 4 * 2**30),
        ("1Ti", 2**40),
        ("1Pi", 2**50),
        ("1Ei", 2**60),
        ("1m", Fraction(1, 1000)),
        ("500m", Fraction(1, 2)),
        ("100u", Fraction(1, 10_000)),
        ("12345n", Fraction(12345, 10**9)),
        ("1k", 1000),
        ("16G", 16 * 10**9),
        ("1M", 10**6),
        ("1T", 10**12),
        ("1P", 10**15),
        ("1E", 10**18),
        ("1e3", 1000),
        ("1E3", 1000),
        ("1e+3", 1000),
        ("1E-3", Fraction(1, 1000)),
        ("1.5e2", 150),
        ("0.5", Fraction(1, 2)),
        (".5", Fraction(1, 2)),
        ("5.", 5),
        ("1.5", Fraction(3, 2)),
        ("+1", 1),
        ("-1", -1),
        ("-1Gi", -(2**30)),
        ("1.5Gi", 3 * 2**29),
        ("0.1m", Fraction(1, 10_000)),
        ("1.G", 10**9),
        ("007", 7),
        (".0001k", Fraction(1, 10)),
        (3, 3),
        (0, 0),
    ],
)
def test_known_values(text, value):
    assert parse_quantity(text) == value
    assert isinstance(parse_quantity(text), Fraction)


@pytest.mark.parametrize(
    "text",
    [
        "1K",
        "1KI",
        "1ki",
        "1Ki ",
        "",
        "--1",
        "+-1",
        "1.2.3",
        "1.1.M",
        "1+1.0M",
        "e3",
        "E3",
        "1e",
        "1e+",
        "1e1.5",
        "-3.01e-",
        "Mi",
        ".",
        "+",
        "-",
        ".Ki",
        " 1",
        "1 ",
        "4 Gi",
        "1\n",
        "\t1",
        "abc",
        "5Xi",
        "1e3Gi",
        "1Gi3",
        "0.1mi",
        "0.1am",
        ".5i",
        "1i",
        "1mm",
        "1kk",
        "١",  # an Arabic-Indic digit: Kubernetes reads ASCII digits only
        "1e1001",
        "1e-1001",
        "nan",
        "inf",
        "0x10",
        "1_000",
    ],
)
def test_refused_forms(text):
    with pytest.raises(InvalidQuantity):
        parse_quantity(text)


def test_invalid_quantity_is_a_value_error_that_explains_itself():
    with pytest.raises(ValueError) as info:
        parse_quantity("1K")
    message = str(info.value)
    assert "'1K'" in message and "'k'" in message and "'Ki'" in message
    assert "'500m'" in message and "'64Gi'" in message  # shows valid examples
    assert info.value.value == "1K"


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("", "empty"),
        (" 1", "whitespace"),
        ("e3", "number"),
        ("1e", "exponent"),
        ("1Xi", "'Xi'"),
        ("1.2.3", "malformed"),
    ],
)
def test_messages_say_what_is_wrong(text, fragment):
    with pytest.raises(InvalidQuantity, match=re.escape(fragment)):
        parse_quantity(text)


# -- non-string inputs -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value", [True, False, None, [1], {"cpu": 1}, b"1", float("nan"), float("inf"), Decimal("NaN")]
)
def test_refused_types(value):
    with pytest.raises(InvalidQuantity):
        parse_quantity(value)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (0.1, Fraction(1, 10)),
        (0.5, Fraction(1, 2)),
        (2.0, 2),
        (-1.25, Fraction(-5, 4)),
        (1e20, 10**20),
        (1e-05, Fraction(1, 10**5)),
    ],
)
def test_floats_mean_their_shortest_decimal(value, expected):
    assert parse_quantity(value) == expected


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_every_finite_float_parses_to_its_repr(value):
    assert parse_quantity(value) == Fraction(Decimal(repr(value)))


@given(st.integers())
def test_ints_are_exact(value):
    assert parse_quantity(value) == value


@given(st.fractions())
def test_fractions_and_decimals_pass_through(value):
    assert parse_quantity(value) == value
    assert parse_quantity(Decimal(value.numerator)) == value.numerator


# -- properties ------------------------------------------------------------------------------------------------


@given(quantities())
def test_every_valid_form_parses_to_its_value(case):
    text, value = case
    assert parse_quantity(text) == value


@given(numbers(), suffixes)
def test_every_suffix_scales_the_number(number, suffix):
    text, value = number
    assert parse_quantity(text + suffix) == value * SUFFIX_VALUES[suffix]
    assert parse_quantity("-" + text + suffix) == -value * SUFFIX_VALUES[suffix]
    assert parse_quantity("+" + text + suffix) == value * SUFFIX_VALUES[suffix]


@given(numbers(), st.sampled_from("eE"), signs, st.integers(0, MAX_EXPONENT))
def test_exponent_forms(number, marker, sign, exponent):
    text, value = number
    signed = -exponent if sign == "-" else exponent
    assert parse_quantity(f"{text}{marker}{sign}{exponent}") == value * Fraction(10) ** signed


@given(st.integers(-(10**20), 10**20), st.integers(0, 12), st.sampled_from(["plain", "exponent", "milli", "nano"]))
def test_round_trip_from_fraction(scaled, places, form):
    """A value with a finite decimal expansion, written in several forms, parses back to itself."""
    value = Fraction(scaled, 10**places)
    sign, magnitude = ("-" if scaled < 0 else ""), abs(scaled)
    if form == "plain":
        text = str(magnitude).rjust(places + 1, "0")
        text = f"{sign}{text[: len(text) - places]}.{text[len(text) - places :]}" if places else f"{sign}{text}"
    elif form == "exponent":
        text = f"{scaled}e-{places}"
    elif form == "milli":
        text = f"{sign}{Fraction(magnitude, 10**places) * 1000}m"
        assume("/" not in text)
    else:
        text = f"{sign}{Fraction(magnitude, 10**places) * 10**9}n"
        assume("/" not in text)
    assert parse_quantity(text) == value


@given(st.integers(-(2**62), 2**62), st.sampled_from(sorted(BINARY_SI)))
def test_round_trip_binary(count, suffix):
    assert parse_quantity(f"{count}{suffix}") == count * BINARY_SI[suffix]


@given(st.text(alphabet="0123456789.+-eEinumkKMGTP i", max_size=8))
def test_accepts_exactly_the_documented_grammar(text):
    """Random strings over the quantity alphabet: accepted exactly when the BNF (written out independently here)
    accepts them, and then with the value the BNF gives them."""
    grammar = re.fullmatch(
        r"(?P<sign>[+-]?)(?P<num>[0-9]+|[0-9]+\.[0-9]+|[0-9]+\.|\.[0-9]+)"
        r"(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|)(?:[eE](?P<exp>[+-]?[0-9]+))?",
        text,
    )
    if grammar and grammar["exp"] is not None and grammar["suffix"] not in ("", "E"):
        grammar = None  # an exponent cannot follow an SI suffix
    if grammar and grammar["exp"] is not None and grammar["suffix"] == "E":
        grammar = None  # "1EE3" is not a form; "1E3" matched with an empty suffix
    if grammar and grammar["exp"] is not None and abs(int(grammar["exp"])) > MAX_EXPONENT:
        grammar = None  # refused on purpose: see vocab.quantity.MAX_EXPONENT
    if grammar is None:
        with pytest.raises(InvalidQuantity):
            parse_quantity(text)
        return
    value = Fraction(Decimal(grammar["num"]))
    value *= SUFFIX_VALUES[grammar["suffix"]]
    if grammar["exp"] is not None:
        value *= Fraction(10) ** int(grammar["exp"])
    assert parse_quantity(text) == (-value if grammar["sign"] == "-" else value)


@given(quantities(), st.sampled_from([" ", "\t", "\n", "\r", "\u00a0"]), st.booleans())
def test_whitespace_is_refused(case, space, before):
    text, _ = case
    with pytest.raises(InvalidQuantity):
        parse_quantity(space + text if before else text + space)


@given(numbers(), st.sampled_from(["K", "KI", "ki", "kI", "mi", "MI", "gi", "Gb", "GB", "Kb", "Xi", "i", "b"]))
def test_wrong_case_and_unknown_suffixes_are_refused(number, suffix):
    with pytest.raises(InvalidQuantity):
        parse_quantity(number[0] + suffix)


@given(numbers(), st.sampled_from(sorted(SUFFIX_VALUES)))
def test_a_suffix_alone_or_doubled_is_refused(number, suffix):
    with pytest.raises(InvalidQuantity):
        parse_quantity(suffix + "" if suffix else "e3")
    assume(suffix)
    with pytest.raises(InvalidQuantity):
        parse_quantity(number[0] + suffix + suffix)


@given(numbers(), numbers())
def test_two_decimal_points_are_refused(first, second):
    assume("." in first[0])
    with pytest.raises(InvalidQuantity):
        parse_quantity(first[0] + "." + second[0].lstrip("."))


@given(quantities())
def test_double_signs_are_refused(case):
    text, _ = case
    with pytest.raises(InvalidQuantity):
        parse_quantity("-" + text if text[0] in "+-" else "--" + text)


# -- counts, CPU and memory helpers -----------------------------------------------------------------------------


@pytest.mark.parametrize(("value", "count"), [("0", 0), ("8", 8), (8, 8), ("1000m", 1), ("1k", 1000), ("2e0", 2)])
def test_parse_count(value, count):
    assert parse_count(value) == count
    assert type(parse_count(value)) is int


@pytest.mark.parametrize("value", ["500m", "1.5", "0.5", "-1", "1Ki ", "", True, None, "1n"])
def test_parse_count_refuses_fractions_negatives_and_garbage(value):
    with pytest.raises(InvalidQuantity):
        parse_count(value)


@given(st.integers(0, 10**6))
def test_parse_count_round_trip(count):
    assert parse_count(str(count)) == count
    assert parse_count(f"{count * 1000}m") == count


@pytest.mark.parametrize(
    ("value", "expected"),
    [("500m", 500), ("2", 2000), (2, 2000), ("0.1m", 1), ("1.0005", 1001), ("0", 0), ("250m", 250), (0.25, 250)],
)
def test_millicores_round_up_like_milli_value(value, expected):
    assert millicores(value) == expected


@pytest.mark.parametrize(
    ("value", "expected"), [("64Gi", 65536), ("1Mi", 1), ("1500Ki", 1), ("1G", 953), ("0", 0), (2**20, 1)]
)
def test_mebibytes_round_down(value, expected):
    assert mebibytes(value) == expected


@given(st.integers(0, 10**7))
def test_format_cpu_round_trips_millicores(milli):
    text = format_cpu(Fraction(milli, 1000))
    assert parse_quantity(text) == Fraction(milli, 1000)
    assert text == (str(milli // 1000) if milli % 1000 == 0 else f"{milli}m")


@pytest.mark.parametrize(
    ("cores", "text"), [(Fraction(16), "16"), (Fraction(31, 2), "15500m"), (Fraction(1, 10_000), "1m"), (4, "4")]
)
def test_format_cpu(cores, text):
    assert format_cpu(cores) == text


@given(st.integers(0, 2**50))
def test_format_memory_round_trips_whole_kibibytes(kib):
    assert format_memory(kib * 1024) == f"{kib}Ki"
    assert parse_quantity(format_memory(kib * 1024)) == kib * 1024


def test_format_memory_rounds_down_to_kibibytes():
    assert format_memory(Fraction(2047)) == "1Ki"
    assert format_memory(64 * 2**30) == "67108864Ki"


# -- what the two parsers this replaces accepted ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value"),
    [
        # gpus.gfd.parse_quantity's table
        ("8", 8),
        ("500m", Decimal("0.5")),
        ("64Gi", 64 * 2**30),
        ("16G", 16 * 10**9),
        ("1e3", 1000),
        ("0", 0),
        # the table of the simulator's former parser (cluster/sim/quantity.py)
        ("4Gi", 4 * 2**30),
        ("2", 2),
        (3, 3),
        ("1.5", Decimal("1.5")),
    ],
)
def test_values_the_old_parsers_agreed_on(text, value):
    assert parse_quantity(text) == value
