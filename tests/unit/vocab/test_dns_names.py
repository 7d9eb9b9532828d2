"""Kubernetes object-name grammar, in one place (vocab.names): RFC 1123 labels and subdomains, checked against the
whole string. A pattern ending in '$' used with re.match lets a trailing newline through ("train\\n"), which the
API server refuses: every caller (job names, claim and secret names, label keys, the simulated API server) now
asks these functions."""

import pytest

from cluster.sim.validation import label_problem
from jobs.storage.mounts import secret_name_problem
from jobs.validation import validate_job_name, validate_labels
from vocab.names import is_dns1123_label, is_dns1123_subdomain, is_label_name


@pytest.mark.parametrize("name", ["train", "a", "x-1", "9lives"])
def test_labels_and_subdomains_accept_plain_names(name):
    assert is_dns1123_label(name) and is_dns1123_subdomain(name) and is_label_name(name)


@pytest.mark.parametrize("name", ["train\n", "Train", "-x", "x-", "", "a_b", "a b"])
def test_a_trailing_newline_or_bad_character_is_refused(name):
    assert not is_dns1123_label(name) and not is_dns1123_subdomain(name)


def test_lengths_are_part_of_the_grammar():
    assert is_dns1123_label("a" * 63) and not is_dns1123_label("a" * 64)
    assert is_dns1123_subdomain(".".join(["a" * 63] * 3) + ".abc") and not is_dns1123_subdomain("a" * 254)
    assert is_label_name("A.b_c-D") and not is_label_name("a" * 64) and not is_label_name("x\n")


def test_every_caller_refuses_a_trailing_newline():
    from django.core.exceptions import ValidationError

    with pytest.raises(ValidationError):
        validate_job_name("train\n")
    assert secret_name_problem("wandb\n")
    with pytest.raises(ValidationError):
        validate_labels({"example.com\n/run": "1"})
    with pytest.raises(ValidationError):
        validate_labels({"run": "abc\n"})
    assert label_problem("run\n", "1") and label_problem("run", "1\n")


def test_other_whole_string_rules_refuse_a_trailing_newline():
    from django.core.exceptions import ValidationError

    from jobs.storage import secrets
    from jobs.validation import validate_env

    with pytest.raises(ValidationError):
        validate_env([{"name": "EPOCHS\n", "value": "1"}])
    assert "username" in secrets._credential_problems("bob\n", "token")
