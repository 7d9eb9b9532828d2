"""Label grammar and working directory checks, against the Kubernetes rules
(https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#syntax-and-character-set): examples
from the docs, every problem at once, and hypothesis over hostile keys, values and paths — whatever passes is
well formed and can never replace one of the portal's own labels in a rendered workload."""

from __future__ import annotations

import re

import pytest
from django.core.exceptions import ValidationError
from hypothesis import given
from hypothesis import strategies as st

from jobs.validation import parse_labels_text, validate_labels, validate_working_dir

NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


@pytest.mark.parametrize(
    "labels",
    [
        {"environment": "production", "tier": "frontend"},  # the docs' examples
        {"example.com/run": "42", "app.example.org/git-sha": "1a2b3c4d", "x": ""},
        {"a" * 63: "b" * 63, ("d" * 60 + ".") * 4 + "com/n": "v"},
    ],
)
def test_well_formed_labels_pass(labels):
    validate_labels(labels)


@pytest.mark.parametrize(
    ("labels", "fragment"),
    [
        ({"gpu-portal.io/team": "x"}, "portal's own"),
        ({"sub.gpu-portal.io/x": "x"}, "portal's own"),
        ({"kubernetes.io/hostname": "x"}, "reserved for Kubernetes"),
        ({"k8s.io/x": "x"}, "reserved for Kubernetes"),
        ({"a/b/c": "x"}, "more than one '/'"),
        ({"/x": "x"}, "more than one '/'"),
        ({"UPPER.com/x": "x"}, "not a DNS subdomain"),
        ({"x_": "x"}, "starting and ending"),
        ({"x": "bad value!"}, "must be empty or"),
        ({"": "x"}, "is empty"),
    ],
)
def test_malformed_labels_say_what_to_fix(labels, fragment):
    with pytest.raises(ValidationError) as caught:
        validate_labels(labels)
    assert fragment in " ".join(caught.value.messages)


def test_every_label_problem_is_reported_at_once():
    with pytest.raises(ValidationError) as caught:
        validate_labels({"gpu-portal.io/a": "x", "b!": "x", "c": "y" * 70, **{f"k{i}": "" for i in range(40)}})
    assert len(caught.value.messages) == 4


def test_the_form_text_is_parsed_with_every_problem_at_once():
    assert parse_labels_text("# comment\nrun = abc\n\ngit-sha=1") == {"run": "abc", "git-sha": "1"}
    with pytest.raises(ValidationError) as caught:
        parse_labels_text("run\nx=1\nx=2")
    assert caught.value.messages == [
        "Line 1: write key=value.",
        "Line 3: the label 'x' is given twice; give each key once.",
    ]


@given(st.dictionaries(st.text(max_size=80), st.text(max_size=80), max_size=5))
def test_whatever_passes_is_kubernetes_label_grammar_outside_reserved_prefixes(labels):
    try:
        validate_labels(labels)
    except ValidationError:
        return
    for key, value in labels.items():
        prefix, _, name = key.rpartition("/")
        assert NAME.match(name) and len(name) <= 63
        assert value == "" or (NAME.match(value) and len(value) <= 63)
        assert len(prefix) <= 253
        assert not prefix.endswith(("gpu-portal.io", "kubernetes.io", "k8s.io"))


@given(st.text(max_size=300))
def test_whatever_working_dir_passes_is_an_absolute_path_without_dotdot_or_control_characters(path):
    try:
        validate_working_dir(path)
    except ValidationError:
        return
    if path:
        assert path.startswith("/") and len(path) <= 255
        assert ".." not in path.split("/") and not any(ord(c) < 32 or ord(c) == 127 for c in path)


@pytest.mark.parametrize("path", ["relative", "/a/../b", "/a\nb", "/" + "x" * 255])
def test_bad_working_dirs_are_refused(path):
    with pytest.raises(ValidationError):
        validate_working_dir(path)
