"""Image references, the CUDA version of known images, environment variables and job names."""

import re

import pytest
from django.core.exceptions import ValidationError
from hypothesis import given, settings
from hypothesis import strategies as st

from jobs.validation import (
    PORTAL_ENV_NAMES,
    RESERVED_ENV_PREFIXES,
    image_cuda_version,
    parse_env_text,
    parse_image,
    validate_env,
    validate_job_name,
)


@pytest.mark.parametrize(
    "reference",
    [
        "nvcr.io/nvidia/pytorch:24.01-py3",
        "nvidia/cuda:12.2.2-runtime-ubuntu22.04",
        "ubuntu",
        "localhost:5000/team/train:v1.2",
        "ghcr.io/org/app@sha256:" + "a" * 64,
        "registry.example.com/a/b/c:latest",
    ],
)
def test_valid_image_references(reference):
    assert parse_image(reference).group("path")


@pytest.mark.parametrize(
    "reference", ["", "Not An Image!", "UPPER/case", "nvidia/cuda:", "a" * 300, "repo:tag:extra", "-lead/x"]
)
def test_invalid_image_references_say_how_to_write_one(reference):
    with pytest.raises(ValidationError, match=r"\[registry/\]repository\[:tag\]"):
        parse_image(reference)


@pytest.mark.parametrize(
    ("reference", "cuda"),
    [
        ("nvidia/cuda:12.4.1-cudnn-devel-ubuntu22.04", "12.4"),
        ("nvcr.io/nvidia/cuda:11.8.0-base-ubuntu22.04", "11.8"),
        ("nvcr.io/nvidia/pytorch:24.01-py3", "12.3"),
        ("nvcr.io/nvidia/pytorch:25.01-py3", "12.8"),
        ("nvcr.io/nvidia/tensorflow:23.10-tf2-py3", "12.2"),
        ("pytorch/pytorch:2.3.0-cuda12.1-cudnn8-runtime", None),  # not an NGC or CUDA base image: unknown
        ("nvcr.io/nvidia/pytorch:19.01-py3", None),  # a release outside the table is not guessed
        ("nvidia/cuda:latest", None),
    ],
)
def test_cuda_version_of_known_images(reference, cuda):
    assert image_cuda_version(reference) == cuda


def test_env_rules():
    validate_env([{"name": "EPOCHS", "value": "10"}, {"name": "_x1", "value": ""}])
    for bad, words in [
        ([{"name": "1ABC", "value": "x"}], "not a valid environment variable name"),
        ([{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}], "set by the NVIDIA device plugin"),
        ([{"name": "CUDA_VISIBLE_DEVICES", "value": "0"}], "set by the NVIDIA device plugin"),
        ([{"name": "A", "value": "1"}, {"name": "A", "value": "2"}], "given twice"),
    ]:
        with pytest.raises(ValidationError, match=words):
            validate_env(bad)


def test_env_text_lines():
    expected = [{"name": "A", "value": "1"}, {"name": "B", "value": " x=y"}]
    assert parse_env_text("A=1\n# comment\n\nB = x=y\n") == expected
    with pytest.raises(ValidationError, match="Line 2: write NAME=value"):
        parse_env_text("A=1\nnonsense")


@pytest.mark.parametrize("name", ["Train", "-x", "x-", "a_b", "", "x" * 41])
def test_bad_job_names(name):
    with pytest.raises(ValidationError, match="lowercase letters"):
        validate_job_name(name)


# -- audit finding 7: exactly what Kubernetes (and the image reference grammar) accepts ---------------------------

#: Kubernetes' rule for an environment variable name (apimachinery IsEnvVarName, v1.20: the pattern, and not
#: "." or starting with "..").
K8S_ENV_NAME = re.compile(r"(?!\.\Z)(?!\.\.)[-._a-zA-Z][-._a-zA-Z0-9]*", re.ASCII)


def _env_ok(name: str) -> bool:
    try:
        validate_env([{"name": name, "value": ""}])
    except ValidationError:
        return False
    return True


@given(st.text(alphabet=st.sampled_from("aZ_9-.\n \t\u00e9\u0660\uff11/="), min_size=0, max_size=8))
@settings(max_examples=300, deadline=None)
def test_env_names_are_exactly_what_kubernetes_accepts(name):
    reserved = name.startswith(RESERVED_ENV_PREFIXES) or name in PORTAL_ENV_NAMES
    assert _env_ok(name) == (bool(K8S_ENV_NAME.fullmatch(name)) and not reserved)


@pytest.mark.parametrize("name", ["FOO\n", "FOO\r\n", "\nFOO", "F\u00d6O", "\u0661X", "A B", "", ".", "..x"])
def test_env_names_kubernetes_refuses_are_refused(name):
    assert not _env_ok(name)


@pytest.mark.parametrize("name", ["my-var", "a.b", ".hidden", "-x", "_x1", "EPOCHS"])
def test_env_names_kubernetes_accepts_are_accepted(name):
    assert _env_ok(name)


@pytest.mark.parametrize(
    "reference",
    [
        "nvidia/cuda:12.2-\u00fc",  # non-ASCII tag
        "nvidia/cuda:\uff11\uff12",  # full-width digits
        "nvidia/cuda:12\u0663",  # Arabic-Indic digit
        "registry.example.com/a/b:t\x0b",  # a vertical tab stripped as whitespace by no registry
        "nvidia/cuda:12.2.2\n",  # trailing newline
        "nvidia/cuda\n:12",
        "r\u00e9gistry.example.com/a:b",
    ],
)
def test_image_references_outside_the_ascii_grammar_are_refused(reference):
    with pytest.raises(ValidationError):
        parse_image(reference)


_IMAGE_CHARS = st.sampled_from("abz09._-/:@\u00fc\u0663\n ")


@given(st.text(alphabet=_IMAGE_CHARS, min_size=1, max_size=20))
@settings(max_examples=300, deadline=None)
def test_every_accepted_image_reference_is_printable_ascii(reference):
    try:
        parse_image(reference)
    except ValidationError:
        return
    assert reference.isascii() and reference.isprintable() and reference == reference.strip()
