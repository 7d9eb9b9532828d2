"""Image references, the CUDA version of known images, environment variables and job names."""

import pytest
from django.core.exceptions import ValidationError

from jobs.validation import image_cuda_version, parse_env_text, parse_image, validate_env, validate_job_name


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
